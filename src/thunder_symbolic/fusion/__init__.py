"""Fused regions: the torch.compile executor's regions compiled by Inductor once for thunder's symbolic sizes and
called without Dynamo (``inductor_regions``)."""
