"""The gradient communication in a step's time: what DDP and FSDP2 move between devices, over
the link the tier (and, across nodes, the cluster) has, and the speed-up it leaves.

Per optimizer step, with W = devices × nodes ranks and B the link's bus bandwidth (NCCL's
busbw: nccl-tests doc/PERFORMANCE.md defines it so that a collective of S bytes takes

    all-reduce      t = 2·(W−1)/W · S / B
    all-gather      t =   (W−1)/W · S / B      (S: the whole gathered size)
    reduce-scatter  t =   (W−1)/W · S / B

whatever W, and "should reflect the speed of the hardware bottleneck: NVLink, PCI, QPI, or
network"):

- DDP all-reduces the trainable gradients (fp32: the adapters for LoRA / QLoRA, every weight
  for full) once per optimizer step: Lightning skips the sync on accumulation micro-batches
  (strategies/parallel.py block_backward_sync → DDP's no_sync).
- FSDP2 (mens: fully_shard per decoder layer and the root, fp32 parameters, no mixed-precision
  policy) all-gathers every parameter shard in forward and again in backward (the layers
  reshard after forward), and reduce-scatters the gradients — every micro-batch: Lightning's
  ModelParallelStrategy has no block_backward_sync of its own, so accumulation still syncs.

B: one node, the tier's intra-node link per device (hw.link.intra_gbs); several nodes, the
slower of that and the node's network (hw.link.inter_gbs, all its NICs): NCCL runs a ring per
channel and stripes the channels over the node's NICs, so the bytes leaving a node cross its
whole network. Both times hw.link.efficiency, ASSUMED 0.8 of the datasheet figure (LINK_SOURCES).

The step is then compute + communication: NO overlap is assumed (DDP's bucketed all-reduce and
FSDP2's prefetched all-gathers do overlap compute in part — Li et al. 2020, "PyTorch
Distributed", VLDB; Zhao et al. 2023, "PyTorch FSDP", VLDB — by an amount that depends on the
kernels and nothing here measures): a conservative time, and a lower bound on the speed-up, the
plan giving the fully-overlapped bound beside it. Pure arithmetic, no torch.
"""
from __future__ import annotations

from dataclasses import dataclass

from mens.plan.memory import Arch, LaneModel

LINK_SOURCES = (
    "hw.link.efficiency 0.8 is ASSUMED from measured NCCL bandwidths: 8 × H100 SXM ring "
    "all-reduce peaked at 741 GB/s of NVLink 4's 900 bidirectional (0.82; ASTRA-sim's HGX-H100 "
    "validation, astra-sim.github.io), 8 × A100 sendrecv 195 GB/s of NVLink 3's 300 per "
    "direction (0.65; li-plus/playground cuda/nccl.md); a tree all-reduce across 2 nodes can beat "
    "the ring bound (2 × 8 H100 on GCP A3 Mega, 8 GiB: busbw 339 GB/s over 8 × 200 Gb/s NICs; "
    "lessizzmore/create-a3mega-ztan-fork ztan-NCCL-test-result)")
OVERLAP = ("no overlap of communication with compute ASSUMED (conservative: DDP's bucketed "
           "all-reduce and FSDP2's prefetched all-gathers hide part of it behind backward and "
           "forward, unmeasured here)")


@dataclass(frozen=True)
class Link:
    """A tier's links (hw.link): GB/s per direction, datasheet figures."""
    intra: str = ""
    intra_gbs: float | None = None     # per device, within a node
    inter: str = ""
    inter_gbs: float | None = None     # per node (all its NICs), between nodes
    efficiency: float = 0.8            # ASSUMED achieved share (LINK_SOURCES)

    def bus(self, nodes: int) -> tuple[float | None, str]:
        """(achieved bus bandwidth GB/s or None when unknown, what it is)."""
        if not self.intra_gbs:
            return None, "the tier states no intra-node link (hw.link.intra_gbs)"
        if nodes <= 1:
            return self.intra_gbs * self.efficiency, (
                f"{self.intra or 'intra-node link'} {self.intra_gbs:g} GB/s per device × "
                f"{self.efficiency:g} achieved")
        if not self.inter_gbs:
            return None, "the tier states no network between nodes (hw.link.inter_gbs)"
        low = min(self.intra_gbs, self.inter_gbs)
        which = (f"{self.inter or 'the network'} {self.inter_gbs:g} GB/s per node"
                 if self.inter_gbs <= self.intra_gbs else
                 f"{self.intra or 'intra-node link'} {self.intra_gbs:g} GB/s per device")
        return low * self.efficiency, f"{which} (the slower hop) × {self.efficiency:g} achieved"


def collectives(arch: Arch, lane: LaneModel, strategy: str, trainable: int,
                trainable_bytes: int, accum: int) -> list[dict]:
    """What one device moves, per micro-step: [{op, bytes, per_micro_step, what}]."""
    if strategy == "fsdp2":
        whole = arch.params()["total"] * trainable_bytes
        return [{"op": "all-gather", "bytes": whole, "per_micro_step": 2,
                 "what": "the parameter shards (fp32), in forward and again in backward"},
                {"op": "reduce-scatter", "bytes": whole, "per_micro_step": 1,
                 "what": "the gradients (fp32), every micro-batch (no skip while accumulating)"}]
    what = ("the adapter's gradients (fp32) only: the base is frozen" if lane.kind != "full"
            else "every weight's gradient (fp32)")
    return [{"op": "all-reduce", "bytes": trainable * trainable_bytes,
             "per_micro_step": 1 / max(accum, 1),
             "what": f"{what}, once per optimizer step (no_sync on accumulation micro-batches)"}]


FACTOR = {"all-reduce": 2.0, "all-gather": 1.0, "reduce-scatter": 1.0}


def seconds(ops: list[dict], world: int, bus_gbs: float) -> float:
    """Per micro-step, one device: Σ ops × their ring factor × bytes / bus bandwidth."""
    ring = (world - 1) / world
    return sum(FACTOR[o["op"]] * ring * o["bytes"] * o["per_micro_step"] / (bus_gbs * 1e9)
               for o in ops)


def communication(arch: Arch, lane: LaneModel, strategy: str, devices: int, nodes: int,
                  accum: int, link: Link, trainable: int, trainable_bytes: int) -> dict | None:
    """The plan's `communication` (plan.json): the collectives, the link, the seconds per
    micro-step (None when the link is unknown), and the one-node seconds for comparison.
    None on one device."""
    world = devices * nodes
    if world <= 1:
        return None
    ops = collectives(arch, lane, strategy, trainable, trainable_bytes, accum)
    bus, how = link.bus(nodes)
    out = {"strategy": strategy, "world": world, "devices": devices, "nodes": nodes,
           "intra": link.intra, "intra_gbs": link.intra_gbs, "inter": link.inter,
           "inter_gbs": link.inter_gbs, "efficiency": link.efficiency,
           "bus_gbs": None if bus is None else round(bus, 3), "bus_how": how,
           "ops": [{**o, "per_micro_step": round(o["per_micro_step"], 6)} for o in ops],
           "bytes_per_optimizer_step": int(sum(o["bytes"] * o["per_micro_step"] * accum
                                               for o in ops)),
           "s_per_micro_step": None, "one_node_s_per_micro_step": None,
           "overlap": OVERLAP, "sources": LINK_SOURCES}
    if bus is not None:
        out["s_per_micro_step"] = round(seconds(ops, world, bus), 6)
        if nodes > 1 and devices > 1:
            one, _ = link.bus(1)
            out["one_node_s_per_micro_step"] = round(seconds(ops, devices, one), 6)
        elif nodes > 1:   # one device per node: one node has nothing to communicate
            out["one_node_s_per_micro_step"] = 0.0
    return out


def scaling(comm: dict, compute_s: float) -> dict:
    """Speed-ups of the planned world over one device (and over one node) at the same
    per-device shape, from one device's compute seconds per micro-step: the no-overlap figure
    the time uses, and the bound if communication hid entirely behind compute."""
    c, w = comm["s_per_micro_step"], comm["world"]
    out = {"compute_s_per_micro_step": round(compute_s, 6),
           "share": round(c / (compute_s + c), 4),
           "speedup_vs_one_device": round(w * compute_s / (compute_s + c), 3),
           "speedup_if_overlapped": round(w * compute_s / max(compute_s, c), 3),
           "linear": w}
    one = comm.get("one_node_s_per_micro_step")
    if comm["nodes"] > 1 and one is not None:
        out["speedup_vs_one_node"] = round(comm["nodes"] * (compute_s + one) / (compute_s + c), 3)
    return out
