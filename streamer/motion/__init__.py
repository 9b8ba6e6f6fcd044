"""What consumers of the masks need beside the pixels: regions, zones and motion events.

:mod:`~streamer.motion.regions` lists the connected components of a mask,
:mod:`~streamer.motion.zones` rasterises the configured polygons (ignored areas and named zones),
:mod:`~streamer.motion.events` turns zone fractions into start and end events, and
:mod:`~streamer.motion.stage` puts the three on the worker's frame path (docs/design.md, "Motion").
"""
