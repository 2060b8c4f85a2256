"""One CPU thread for torch, decided before torch starts: a lecture beside other busy work must
lose only its share of the cores, not twenty times its time.

torch splits an operation across OpenMP threads and waits at the end until every thread has
done its share. The course's models are small, so a lecture is many short operations, and each
one needs all of its threads on a core at once. Alone on a machine that works; beside another
busy process (an assignment's tests, a second notebook, a video call) one of them is often
waiting for a core, and the others wait for it, spinning: GNU OpenMP, torch's on Linux and on
Colab, spins about 3 ms before it sleeps, a whole time slice of the core the late thread needs.
libgomp shortens the spin only when its own process has more threads than cores; it cannot see
other processes. Measured on 2 cores (the course's contention benchmark, every lecture): with two
threads, beside one busy torch process, the lectures that train ran 6 to more than 8 times
their time alone (23 to 35 times on a machine with more going on); with one thread, 1.1 to
1.5 times (1.9 for lecture 07, whose few seconds are mostly starting up), and alone one thread
took 0.64 to 1.07 times as long as two: the models are too small for a second thread to pay.
Keeping two threads with a short spin (``GOMP_SPINCOUNT=1000``) helped beside busy work too,
but made lectures 02 and 03 1.3 and 1.6 times slower alone: waking a sleeping thread takes
longer than their short operations do.

``configure`` sets ``OMP_NUM_THREADS=1`` (the thread count of torch, MKL and oneDNN) unless the
environment names a count already, a choice this keeps: ``OMP_NUM_THREADS=4`` before starting
Jupyter gives a lecture four threads. ``import seqlab`` calls it first, before torch loads; a
torch loaded earlier is set to one thread with ``torch.set_num_threads``. The results of a few
lectures change in their last digits with the thread count; every claim holds at 1, 2 and 4
threads (the sweeps ``seqlab.measured`` ships).
"""

from __future__ import annotations

import os
import sys

THREADS = 1


def configure() -> bool:
    """One thread for torch unless ``OMP_NUM_THREADS`` is set; True when this set it."""
    if "OMP_NUM_THREADS" in os.environ:
        return False
    os.environ["OMP_NUM_THREADS"] = str(THREADS)
    if "torch" in sys.modules:  # loaded already: its thread pool read the environment then
        sys.modules["torch"].set_num_threads(THREADS)
    return True


configure()
