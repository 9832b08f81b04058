"""All-reduce bus bandwidth check: is the fabric between the job's nodes as fast as it
should be (EFA), or did NCCL fall back to TCP sockets?"""
