"""Read the plotted values of the paper's figures from their images alone.

An independent check of the values in ``paper/claims.yaml``: nothing here knows a registry or simulator
value. Per figure image (``paper-fig<N>.png``) it

* finds the axes frames (long dark lines joined into rectangles) and orders them into the figure's grid;
* calibrates each axis from its tick marks (the short dark lines outside the frame, centred by their
  darkness) and their labels, read glyph by glyph against DejaVu Sans digits rendered here (matplotlib's
  default font, the paper's);
* reads the legend: each entry's colour, its marker shape (the sample above and below its line compared
  with matplotlib's own marker outlines) and its text, matched against the figure's label lexicon
  (:data:`.layouts.FIGURES`); the plotted marker size is fitted in the panels (legends may draw markers larger);
* finds every series' marker at every x tick by template matching on the series' colour mask (coverage of
  the template minus the share of a ring around it on that colour), and maps its centre through the axis
  calibration; bars (Fig. 3) are read from the centre of their top edge, Fig. 3's magnified insets too.

A marker is *readable* when at least :data:`.markers.MIN_COVERAGE` of its template lies on its own colour (not
hidden by another series), at most :data:`.markers.MAX_SPILL` of the ring around it does (no second marker of the
same colour merged into it), most of it lies inside the frame, and no other series of the same colour fits there as
well (within :data:`.markers.SHAPE_MARGIN`). A bar is readable when at least :data:`.bars.MIN_BAR_PX` tall. Only
the figure's layout (which panel is which model and dataset, which legend label is which method, how a metric key
is formed) comes from :data:`.layouts.FIGURES`.

Modules, each importing only those listed before it: ``image`` (pixels, masks, components), ``axes`` (frames,
ticks, tick labels, calibration), ``markers`` (marker templates and matching), ``legend``, ``layouts`` (the paper's
figures: :data:`.layouts.FIGURES`; panels), ``bars``, ``read`` (:func:`.read.digitise_figures`), ``agreement``
(readings against the claims; image checksums and origins) and ``verbs`` (the ``digitise`` verb). This file stays
a docstring: importers import the submodules, so the CLI's start-up loads none of them.
"""
