"""The book's own tooling: training every model the chapters load before they run
(:mod:`.prepare`), executing the notebooks (:mod:`.execute`), the figures' style
(:mod:`.plotting`) and the study's results in prose (:mod:`.quotes`). The top of the
import graph: nothing in the package imports it.
"""
