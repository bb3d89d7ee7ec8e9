"""signlion.torch: Distributed Lion as a torch.optim.Optimizer, and the sign all-reduce for
any PyTorch code.

DistributedLion flattens its parameters into buckets (at most bucket_cap_mb each, made in
reverse registration order within a (param group, dtype)): each parameter's .data becomes a
view of its bucket, and the optimizer updates a bucket in place with one call into
libnccl-sign.so per step (ncclSignLionStep: the two fused passes around one sign all-reduce).
With overlap=True (the default) a bucket's step starts during backward, as soon as the last
of its gradients is accumulated, the way DDP's reducer starts its all-reduces; step() starts
what is left and waits for all of it.

CPU tensors use signlion's host communicator, bootstrapped through the
torch.distributed store of the process group (no extra address); its blocking calls run
on one background thread per optimizer. CUDA tensors use the ncclComm_t of the process
group's NCCL backend (ProcessGroupNCCL's _comm_ptr(), PyTorch 2.8 and later): a step is
enqueued (ncclSignLionStepAsync) on the current stream, or with overlap on a side stream
that the current stream waits for in step(), and never waits for the GPU.

It keeps torch.optim's shape (param_groups read at every step, add_param_group,
state[p]["exp_avg"], torch's state_dict format) with the distributed part behind
it: the ranks check at construction that they hold the same parameters, take
rank 0's values, and agree at every step on which parameters have a gradient
(docs/PYTORCH.md, "As a torch.optim optimizer").

sign_all_reduce(tensor, op, group, async_op) is the sign all-reduce shaped like
torch.distributed.all_reduce, and sign_majority_hook a DDP communication hook made of it
(signSGD with majority vote for any DDP model).

This module gathers the public names of the modules that implement them, each with one job:
signlion.distributed_lion (the optimizer and its steps), signlion.lion_buckets (its buckets),
signlion.lion_state (state_dict and load_state_dict), signlion.lion_hyperparameters (a param
group's checks), signlion.rank_agreement (how its ranks agree outside a step),
signlion.process_groups (a process group's ranks as communicators), signlion.host_comm_cache
(sign_all_reduce's communicators per group) and signlion.sign_all_reduce (the collective and
the DDP hook). Nothing imports this module back.
"""
import torch  # noqa: F401  the names signlion.torch has always had beside its own
import torch.distributed as dist  # noqa: F401

from . import capi  # noqa: F401
from .distributed_lion import CommError, DistributedLion  # noqa: F401
from .lion_buckets import _Bucket  # noqa: F401  (a test counts its saves)
from .process_groups import (host_comm_from_process_group, nccl_comm_from_process_group,  # noqa: F401
                             process_group_timeout, resolve_timeout)
from .sign_all_reduce import (HOST_COMM_CACHE_SIZE, SignHookState, clear_host_comm_cache,  # noqa: F401
                              host_comm_cache_info, release_host_comm, sign_all_reduce, sign_majority_hook)
