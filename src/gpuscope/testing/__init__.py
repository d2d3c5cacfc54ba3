"""Generated traces with known answers: the simulator and the labelled suite.

Contract: :mod:`gpuscope.testing.generator` writes real Kineto traces with injected causes and their
ground truth (its public names are re-exported here); :mod:`gpuscope.testing.groundtruth` is the
labelled suite built on it (imported on demand: it runs the diagnosis). Layout:

* ``config``: the injections (one per cause), the devices, :class:`GeneratorConfig`;
* ``truth``: the answers (:class:`Truth`, :class:`Gap`) and :class:`GeneratedTrace`;
* ``_sim``: one rank's discrete-event simulation and the model's constants and kernel names;
* ``_program``: the simulated training loop and each injection's shape in it;
* ``_output``: the truth and the Kineto document of a finished simulation;
* ``generator``: the entry points (:func:`generate`, :func:`generate_job`, :func:`apply_fix`,
  the scaling and batch series).
"""

from gpuscope.testing.generator import *  # noqa: F403
from gpuscope.testing.generator import __all__ as __all__
