"""What the app serves from, and how: the runs found under the roots and their opaque keys
(``registry``), reading and analysing them and keeping the results (``loading``,
``runfacts``, ``results``, ``background``, ``runpool``), and the HTTP side: waitress behind
a token (``serving``), the Host and Origin gate (``hosts``) and the callback guard (``guard``).
"""
