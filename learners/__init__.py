"""Amortized generators and RL policies: the models only (their runners, metrics and reports are in
``evaluation``).

Importing the package imports every method module (``learners.registry``), so that every method
is registered under its ``method`` name before a config or a saved model asks for it; the base
module (``learners.base``) never imports the methods back.
"""

import learners.registry  # noqa: F401
