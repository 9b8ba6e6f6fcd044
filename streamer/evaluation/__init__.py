"""The evaluation tooling, apart from the service: ``kdrsdl evaluate`` and what it needs.

- :mod:`streamer.evaluation.cdnet`: CDnet 2014's dataset layout (sequences, temporalROI, ground
  truth);
- :mod:`streamer.evaluation.peers`: the subtractors scored beside ours (OpenCV's, BGSLibrary's);
- :mod:`streamer.evaluation.protocols`: the CDnet protocol and the paper's, and CDnet's averages;
- :mod:`streamer.evaluation.report`: the table, the F-measure matrix and ``report.md``;
- :mod:`streamer.evaluation.cli`: the command line.

docs/evaluation.md says what the protocols measure and how to run them.
"""
