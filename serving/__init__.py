"""Serving a trained generator: the HTTP service and the offline batch mode.

The top layer of the library (``envs`` <- ``solvers`` <- ``data_gen`` <- ``learners`` <-
``serving`` <- the scripts): it may import every package below it, and none of them imports it.
"""
