"""The dashboard's charts, as pure functions: analysis tables in, plotly Figure out, with no
I/O and no app state (times on axes in ms). ``charts``: the look every chart shares and the
Overview, Kernels, Communication, Counters and Compare charts; ``roofline``: the Kernels
page's roofline; ``timeline``: the Timeline page's lanes.
"""
