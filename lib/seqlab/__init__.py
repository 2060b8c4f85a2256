"""seqlab: the library behind the neural sequence models course.

Every lecture notebook imports from here and shows the source of what it teaches
(``seqlab.show_source``), so there is one implementation, tested once.
"""

from .device import autocast, fast_mode, get_device
from .results import record
from .seeding import seed_everything
from .source import show_source

__version__ = "0.1.0"
__all__ = ["autocast", "fast_mode", "get_device", "record", "seed_everything", "show_source",
           "__version__"]
