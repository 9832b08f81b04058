"""GPU node check over NVML: are this node's GPUs the ones its instance type should have,
and healthy enough to train on?"""
