"""What the Timeline page draws, before plotly: a rank's events as lanes of intervals in ns
from the run's origin (``data``), the window and rows shown at a zoom (``view``), the
details of a clicked event (``event``) and the links between findings and the places in
the timeline they point at (``links``).
"""
