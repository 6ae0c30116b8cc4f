"""thunderfx (``thunder.dynamo``): the verdicts of its splitter kept across processes (``verdict_cache``) and vmap
regions of Dynamo's graphs (``fx_vmap``).
"""
