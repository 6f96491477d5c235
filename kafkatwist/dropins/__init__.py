"""
The package drop-in handler modules load under.

Like C{twisted.plugins}, its C{__path__} is extended at startup -- here with
the directories on C{plugin.paths} -- so C{twisted.plugin.getPlugins} finds
the modules there and imports them as C{kafkatwist.dropins.<module>}.
"""

import os

BASE_PATH = [os.path.dirname(os.path.abspath(__file__))]
__path__ = list(BASE_PATH)


def setPaths(paths):
    """
    Search C{paths} (and nothing else configured before).
    """
    global __path__
    __path__[:] = BASE_PATH + [os.path.abspath(p) for p in paths]
