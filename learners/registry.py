"""Imports every generator module so that ``@register`` fills ``GENERATORS``."""

import learners.full_action  # noqa: F401
import learners.grouped  # noqa: F401
import learners.named_action  # noqa: F401
import learners.named_cfe  # noqa: F401
import learners.policies  # noqa: F401
