"""The offers catalogue: dated GPU offers (provider, GPU × count, $/h) and the hw tier each maps to.

The shipped catalogue (mens/assets/cloud/offers.csv) was copied from SkyPilot's public catalog
CSVs, every row citing its file and row; `cloud.catalog=` reads another file of the same layout.
`refresh()` rebuilds one from the SkyPilot catalogs on this machine (~/.sky/catalogs/v8/<cloud>/
vms.csv). Reading is strict: a malformed row is a DataError naming file:line, never skipped.
"""
from __future__ import annotations

import csv
import datetime as dt
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from mens.errors import ConfigError, DataError
from mens.resources import ASSETS

SHIPPED = ASSETS / "cloud" / "offers.csv"
NETWORK = ASSETS / "cloud" / "network.csv"   # each provider's network between nodes, cited
COLUMNS = ("provider", "gpu", "count", "gpu_memory_gb", "vcpus", "ram_gb", "price_hour",
           "spot_price_hour", "region", "date", "source")
PROVIDERS = ("runpod", "vast", "gcp", "lambda", "aws")   # SkyPilot's cloud names (`infra:`)


def tier_of() -> dict[str, str]:
    """SkyPilot accelerator name → mens hw tier, from each tier's catalog_names (conf/hw): the
    names SkyPilot's catalog lists (skypilot-catalog catalogs/v8/common/accelerators.csv) for the
    card a tier describes. "A10" (Azure, Lambda, OCI) is not the A10G; "GH200" and "A40" have
    no tier. A name two tiers claim is a ConfigError (exit 2)."""
    return _claimed("catalog_names", lambda hw: hw.catalog_names)


def board_tiers() -> dict[tuple[str, str], str]:
    """(plain SkyPilot name, board form) → tier, from each tier's catalog_boards (below)."""
    return _claimed("catalog_boards", lambda hw: hw.catalog_boards.items())


def _claimed(field: str, keys) -> dict:
    from mens.plan.hardware import tiers

    out: dict = {}
    for tier, hw in tiers().items():
        for key in keys(hw):
            if key in out:
                raise ConfigError(f"{key!r} is in the {field} of both hw/{out[key]} and hw/{tier}: "
                                  f"an offer must plan on one tier; drop it from one of them.",
                                  key="hw")
            out[key] = tier
    return out


# SkyPilot has no name of its own for the PCIe boards: plain "H100" and "A100-80GB" cover PCIe and
# SXM alike (each board's tier claims the name in its catalog_boards), and the H100 PCIe runs at
# ~0.76x the SXM's TFLOPS (756 vs 989), so which board an offer is decides its hours. Per provider,
# by what the offer lists: its form where the instance type or GPU description says it (Vast
# "1x-H100_SXM-…", Lambda "gpu_1x_h100_sxm5" / "…_pcie", a refreshed RunPod row's "A100 PCIe"), else
# the provider's naming: RunPod's plain names ARE its PCIe boards (SkyPilot's fetch_runpod.py
# renames RunPod's A100-PCIe to A100-80GB and H100-PCIe to H100, beside A100-80GB-SXM / H100-SXM);
# GCP's a2-ultragpu / a3 and AWS's p4de / p5 are SXM. A plain name whose form neither says is
# planned on the slower PCIe tier (hours too long rather than too short) and `Offer.board` says so.
# The listed memory decides the rest: an H100 with 94 GB is the NVL, an "A100" with 80 GB the 80 GB
# card.
PLAIN_FORM = {"runpod": "pcie", "gcp": "sxm", "aws": "sxm"}


def board(provider: str, gpu: str, memory_gb: float | None, text: str = "") -> tuple[str | None, str]:
    """(tier, why) of an offer: tier_of()'s, except a plain H100 / A100 mapped to its board by
    the form it lists (`text`: its instance type and GPU description) or its provider's naming."""
    boards = board_tiers()
    name = gpu
    if gpu == "A100" and (memory_gb or 0) >= 60:
        name = "A100-80GB"
    if gpu == "H100" and (memory_gb or 0) >= 90:
        return boards[("H100", "nvl")], f"{memory_gb:g} GB listed: the H100 NVL"
    if not any(shared == name for shared, _ in boards):
        return tier_of().get(gpu), "by name"
    t = text.upper().replace(" ", "_")
    said = next((f for f, w in (("nvl", "NVL"), ("pcie", "PCIE"), ("sxm", "SXM"))
                 if re.search(rf"(?<![A-Z]){w}", t)), None)
    form = said or PLAIN_FORM.get(provider)
    spelt = {"sxm": "an SXM", "pcie": "a PCIe", "nvl": "an NVL"}
    if said:
        why = f"the offer lists {spelt[said]} board"
    elif form:
        why = f"{provider}'s plain {gpu} is {spelt[form]} board"
    else:
        form, why = "pcie", (f"{provider} does not say which {gpu} board: planned on the slower "
                             f"PCIe figures")
    if (name, form) not in boards:   # an A100-80GB "NVL": no such board; the slower PCIe's
        form = "pcie"
    return boards[(name, form)], why


@dataclass(frozen=True)
class Offer:
    provider: str
    gpu: str
    count: int
    gpu_memory_gb: float
    vcpus: float
    ram_gb: float
    price_hour: float
    spot_price_hour: float | None
    region: str
    date: str
    source: str
    line: int = 0          # where it was read (file:line in messages)

    @property
    def id(self) -> str:
        """What `cloud.offer=` names: provider:GPU:count (unique within a catalogue)."""
        return f"{self.provider}:{self.gpu}:{self.count}"

    @property
    def tier(self) -> str | None:
        return board(self.provider, self.gpu, self.gpu_memory_gb, self.source)[0]

    @property
    def board(self) -> str:
        """Why this offer plans on its tier (a plain H100 / A100: which board, and from what)."""
        return board(self.provider, self.gpu, self.gpu_memory_gb, self.source)[1]

    def age_days(self, today: dt.date | None = None) -> int:
        return ((today or dt.date.today()) - dt.date.fromisoformat(self.date)).days

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("line")
        return {"id": self.id, **d}


def catalog_path(cfg) -> Path:
    return Path(os.path.expanduser(cfg.cloud.catalog)) if cfg.cloud.catalog else SHIPPED


def _num(path, n: int, col: str, text: str, optional: bool = False, integer: bool = False):
    if optional and text.strip() == "":
        return None
    try:
        v = int(text) if integer else float(text)
    except ValueError:
        raise DataError(f"column `{col}` is {text!r}, not a number{' (or empty)' if optional else ''}: "
                        f"fix the row, or rebuild the catalogue with `mens cloud catalog refresh`.",
                        path=path, line=n, key="cloud.catalog") from None
    if v < 0 or (integer and v < 1):
        raise DataError(f"column `{col}` is {text}: it must be positive.", path=path, line=n,
                        key="cloud.catalog")
    return v


def load(path: Path | str = SHIPPED) -> list[Offer]:
    """Every offer of a catalogue file. `#` lines are comments. Raises DataError (file:line)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"cloud.catalog={path}: no such file. Give an offers CSV with columns "
                          f"{', '.join(COLUMNS)}, or leave cloud.catalog null for the shipped one.",
                          key="cloud.catalog")
    lines = path.read_text().splitlines()
    numbered = [(n, ln) for n, ln in enumerate(lines, 1) if ln.strip() and not ln.startswith("#")]
    if not numbered:
        raise DataError("no header and no offers.", path=path, key="cloud.catalog")
    reader = csv.reader([ln for _, ln in numbered])
    header = [h.strip() for h in next(reader)]
    if header != list(COLUMNS):
        raise DataError(f"the header is {','.join(header)}; it must be {','.join(COLUMNS)}.",
                        path=path, line=numbered[0][0], key="cloud.catalog")
    offers, seen = [], {}
    for (n, _), row in zip(numbered[1:], reader):
        if len(row) != len(COLUMNS):
            raise DataError(f"{len(row)} fields where the header has {len(COLUMNS)} "
                            f"({', '.join(COLUMNS)}): quote a field that holds a comma.",
                            path=path, line=n, key="cloud.catalog")
        r = dict(zip(COLUMNS, (c.strip() for c in row)))
        if r["provider"] not in PROVIDERS:
            raise DataError(f"provider {r['provider']!r} is not one mens knows "
                            f"({', '.join(PROVIDERS)}: SkyPilot's cloud names).",
                            path=path, line=n, key="cloud.catalog")
        try:
            dt.date.fromisoformat(r["date"])
        except ValueError:
            raise DataError(f"date {r['date']!r} is not YYYY-MM-DD.", path=path, line=n,
                            key="cloud.catalog") from None
        if not r["gpu"] or not r["source"]:
            raise DataError("every row needs its gpu and its source (where the price came "
                            "from).", path=path, line=n, key="cloud.catalog")
        o = Offer(r["provider"], r["gpu"], _num(path, n, "count", r["count"], integer=True),
                  _num(path, n, "gpu_memory_gb", r["gpu_memory_gb"]),
                  _num(path, n, "vcpus", r["vcpus"]), _num(path, n, "ram_gb", r["ram_gb"]),
                  _num(path, n, "price_hour", r["price_hour"]),
                  _num(path, n, "spot_price_hour", r["spot_price_hour"], optional=True),
                  r["region"], r["date"], r["source"], n)
        if o.id in seen:
            raise DataError(f"offer {o.id} appears twice (also line {seen[o.id]}): keep one row "
                            f"per provider, GPU and count.", path=path, line=n, key="cloud.catalog")
        seen[o.id] = n
        offers.append(o)
    return offers


def select(cfg, offers: list[Offer]) -> list[Offer]:
    """The offers of cloud.providers (all when empty). An unknown provider is a ConfigError."""
    wanted = list(cfg.cloud.providers)
    have = sorted({o.provider for o in offers})
    bad = [p for p in wanted if p not in have]
    if bad:
        raise ConfigError(f"cloud.providers={bad} names providers the catalogue has no offers "
                          f"from; it has {', '.join(have)} (e.g. `cloud.providers=[runpod,gcp]`, "
                          f"or [] for all).", key="cloud.providers")
    return [o for o in offers if not wanted or o.provider in wanted]


def find(offers: list[Offer], offer_id: str) -> Offer:
    for o in offers:
        if o.id == offer_id:
            return o
    gpus = sorted({o.gpu for o in offers})
    raise ConfigError(f"cloud.offer={offer_id} is not in the catalogue: offers are named "
                      f"provider:GPU:count (e.g. {offers[0].id if offers else 'runpod:H100-SXM:1'}); "
                      f"its GPUs are {', '.join(gpus)}. `mens cloud estimate` lists them.",
                      key="cloud.offer")


# --- refresh from SkyPilot's catalog CSVs ---------------------------------------------------
def _f(v: str) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _gpu_memory(name: str, names: dict[str, str]) -> float | None:
    from mens.config.options import load_option
    tier = names.get(name)
    return load_option("hw", tier).memory_gb if tier else None


def refresh(sky_dir: Path | str, out: Path | str, today: str | None = None) -> dict:
    """Rebuild a catalogue from <sky_dir>/<cloud>/vms.csv for every cloud of PROVIDERS found.
    One offer per (cloud, GPU, count): the cheapest region. GCP lists the host VM and the
    accelerators in separate rows: an offer is a host row (vCPUs, RAM, its price) plus the
    accelerator row of the same region and zone with the count the host type carries (a2-*-Ng,
    a3-*-Ng, g2-*), priced as their sum. GPUs with no hw tier are skipped and counted."""
    sky_dir = Path(os.path.expanduser(str(sky_dir)))
    today = today or dt.date.today().isoformat()
    best: dict[tuple, list] = {}
    skipped: dict[str, int] = {}
    read, names = [], tier_of()
    for cloud in PROVIDERS:
        f = sky_dir / cloud / "vms.csv"
        if not f.is_file():
            continue
        read.append(str(f))
        with open(f, newline="") as fh:
            rows = list(csv.DictReader(fh))
        for n, row, gpu, count, vcpus, ram, price, spot in _offers_of(cloud, rows):
            if gpu not in names:
                skipped[gpu] = skipped.get(gpu, 0) + 1
                continue
            key = (cloud, gpu, count)
            rec = [cloud, gpu, count, _gpu_memory(gpu, names), vcpus, ram, round(price, 5),
                   round(spot, 5) if spot else "", row.get("Region", ""), today,   # 0: none
                   f"{f} line {n} ({row.get('InstanceType') or gpu}{_listed_board(row)})"]
            if key not in best or price < best[key][6]:
                best[key] = rec
    if not read:
        raise ConfigError(f"cloud.sky_catalogs={sky_dir}: no <cloud>/vms.csv there for any of "
                          f"{', '.join(PROVIDERS)}. Run `sky check` / `sky show-gpus` once (SkyPilot "
                          f"downloads its catalogs there), or point cloud.sky_catalogs elsewhere.",
                          key="cloud.sky_catalogs")
    from io import StringIO
    buf = StringIO()
    buf.write(f"# rebuilt by `mens cloud catalog refresh` on {today} from {', '.join(read)}\n")
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    w.writerows(sorted(best.values(), key=lambda r: (r[0], r[1], r[2])))
    from mens.run.rundir import atomic_write
    atomic_write(out, buf.getvalue())
    return {"offers": len(best), "read": read, "skipped_no_tier": skipped, "out": str(out)}


def _listed_board(row: dict) -> str:
    """'; <GPU name>' from a row's GpuInfo when it names a board (RunPod: 'A100 PCIe'), so the
    form board() reads stays in the catalogue's `source`."""
    m = re.search(r"'Name':\s*'([^']*)'", row.get("GpuInfo") or "")
    return f"; {m.group(1)}" if m and re.search(r"PCIE|SXM|NVL", m.group(1).upper()) else ""


def _offers_of(cloud: str, rows: list[dict]):
    """(line, row, gpu, count, vcpus, ram, price, spot) for each GPU offer of one vms.csv."""
    if cloud != "gcp":
        for n, r in enumerate(rows, 2):
            count, price = _f(r.get("AcceleratorCount")), _f(r.get("Price"))
            if r.get("AcceleratorName") and count and price:
                yield (n, r, r["AcceleratorName"], int(count), _f(r.get("vCPUs")),
                       _f(r.get("MemoryGiB")), price, _f(r.get("SpotPrice")))
        return
    accel = {}   # (name, count, zone) → row: GCP's accelerator rows have no InstanceType
    for r in rows:
        if not r.get("InstanceType") and r.get("AcceleratorName"):
            accel[(r["AcceleratorName"], int(_f(r["AcceleratorCount"]) or 0),
                   r.get("AvailabilityZone"))] = r
    gpu_of_family = {"a2-ultragpu": "A100-80GB", "a2-highgpu": "A100", "a2-megagpu": "A100",
                     "a3-highgpu": "H100", "a3-megagpu": "H100-MEGA", "a3-ultragpu": "H200"}
    for n, r in enumerate(rows, 2):
        it = r.get("InstanceType") or ""
        family, _, size = it.rpartition("-")
        if family not in gpu_of_family or not size.endswith("g") or not size[:-1].isdigit():
            continue
        count = int(size[:-1])
        a = accel.get((gpu_of_family[family], count, r.get("AvailabilityZone")))
        host, price = _f(r.get("Price")), _f(a.get("Price")) if a else None
        if host is None or price is None:
            continue
        hs, s = _f(r.get("SpotPrice")), _f(a.get("SpotPrice"))
        yield (n, r, gpu_of_family[family], count, _f(r.get("vCPUs")), _f(r.get("MemoryGiB")),
               host + price, hs + s if hs is not None and s is not None else None)


def network(provider: str, gpu: str, path: Path = NETWORK) -> dict | None:
    """The network between two of a provider's nodes of this GPU (network.csv: `inter`,
    `inter_gbs` GB/s per node and direction, `source`), the first matching row (`*`: any GPU);
    None when the provider has none."""
    lines = [ln for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    for r in csv.DictReader(lines):
        if r["provider"] == provider and r["gpu"] in (gpu, "*"):
            return {"inter": r["inter"], "inter_gbs": float(r["inter_gbs"]), "source": r["source"]}
    return None
