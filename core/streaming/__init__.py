"""The streaming background model: KDRSDL on a sliding window, a foreground mask per frame."""
