"""The pipeline: from a call's arguments to a compiled entry and back to eager's outputs.

One stage per module, in the order a first call runs them: ``dispatch`` (entries and their
guards) → ``frontend`` (input layout, entry guard) → ``pipeline`` (sequences the rest) →
``symbolic`` → ``analysis`` (``metadata``, ``signature``; ``eager_rewrites``, ``effects``,
``view_geometry``)
→ ``aliasing`` → ``tracing`` → the partitioner the user chose (top level) → ``subclasses`` (graphs over tensor
subclasses retraced over their inner tensors) → the compilers (top level) →
``runtime``. Nothing here is imported by users; the public names are re-exported by
:mod:`aotgrad`. docs/architecture.md says which module decides what.
"""
