"""Failures practitioners hit with positions, each reproduced and then fixed (the
chapter book/failures.ipynb; each demonstration is also a test in ``tests/``).

Every module holds one public function per failure: it computes the symptom the wrong
way (written out and named as the wrong way) and its absence with the package's fix,
and returns the numbers the chapter shows. The fixes themselves live in the layers they
belong to (:mod:`posenc.rope_config`, :mod:`posenc.layers.surgery`, :mod:`posenc.rope`,
:mod:`posenc.layers.kv_cache`, ...); nothing here is a second implementation of them.
"""
