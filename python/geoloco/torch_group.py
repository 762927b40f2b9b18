"""The part of geoloco.torch.DiLoCo that keeps the ranks of a site (a
torchrun group) together: rank 0's values and parameters on every rank, the
check after a rejoin that every rank holds rank 0's parameters, and the
ending of a torchrun worker. A mixin: DiLoCo provides the group (_group,
_distributed, _rank), the parameters (_params) and the job's name."""

import os
import sys

import torch
import torch.distributed as dist

__all__ = ["SiteGroup", "leave_process_group"]


def leave_process_group() -> None:
    """Ends a torchrun worker after its work is saved: every rank leaves the
    group together (gloo aborts a process that exits inside it), then the
    process ends at once. torch 1.13 (Debian 12's) can hang in the
    interpreter's finalization after a gloo group, its threads racing the
    teardown, so the finalization is skipped: call it last."""
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


class SiteGroup:
    def _share(self, value):
        """Rank 0's value on every rank of the site."""
        if not self._distributed:
            return value
        box = [value]
        dist.broadcast_object_list(box, src=self._src(), group=self._group)
        return box[0]

    def _src(self):
        if self._group is None:
            return 0
        find = getattr(dist, "get_global_rank", None) or dist.distributed_c10d._get_global_rank  # torch < 2.0
        return find(self._group, 0)

    def _check_replicas(self):
        """After a rejoin: every rank holds rank 0's parameters, element for
        element (a MAX and a MIN all-reduce of each parameter equal to this
        rank's own, NaN equal to NaN; on the parameters' device, with one
        parameter's copy at a time and one value read back to the host).
        Raises on every rank when one differs."""
        if not self._distributed:
            return
        with torch.no_grad():
            device = self._params[0][1].device
            differs = torch.zeros(1, dtype=torch.int32, device=device)
            for _, p in self._params:
                t = torch.empty_like(p.data)
                for op in (dist.ReduceOp.MAX, dist.ReduceOp.MIN):
                    t.copy_(p.data)
                    dist.all_reduce(t, op=op, group=self._group)
                    same = torch.isclose(t, p.data, rtol=0, atol=0, equal_nan=True).all()
                    differs |= (~same).to(torch.int32)
                del t
            dist.all_reduce(differs, op=dist.ReduceOp.MAX, group=self._group)
        if int(differs.item()):
            raise RuntimeError("geoloco.torch: after rejoining job %s the ranks of this site hold different "
                               "parameters; the site's trainer must be started again" % self.job)
        print("geoloco.torch: rank %d holds rank 0's parameters after the rejoin, element for element"
              % self._rank, flush=True)

    def _broadcast_params(self):
        if not self._distributed:
            return
        with torch.no_grad():
            for _, p in self._params:
                dist.broadcast(p.data, src=self._src(), group=self._group)
