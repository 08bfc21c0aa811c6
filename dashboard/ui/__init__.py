"""Layout building blocks that the pages share and that know nothing of a request: cards,
badges, the header, graphs and grids (``components``, ``grids``), analysis tables in
display names and units (``tables``) and the banner of what a run lacks (``banner``).
"""
