"""What runs on every call of a jitted function and around its compiles: the short call path of cache hits
(``dispatch``), the garbage collector paused while compiling (``gc_pause``), and tracing a step as under
constant values (``cache_option``).
"""
