"""Operations: metrics and health, sd_notify, thread budgets, the heap."""
