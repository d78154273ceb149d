"""Imports every generator module so that ``@register`` fills ``GENERATORS``."""
