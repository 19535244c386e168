"""What a run directory holds, owned in one place (torch-free): its layout and atomic writes
(rundir.py), the receipts written into it (receipt.py: gate.json), eval.json's metric row and
its one reading (evalrow.py), content hashing (hashing.py) and the telemetry vocabulary. Every other stage reads and writes a run through these."""
