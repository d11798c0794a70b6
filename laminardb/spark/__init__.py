"""Spark as a cluster service: the standalone master and workers that ``ray up`` starts
(``standalone.py``) and how big they are (``resources.py``)."""
