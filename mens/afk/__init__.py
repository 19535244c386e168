"""The AFK queue (issue #16): `mens afk` trains the ladder's missing cells while nobody watches.

    mens afk afk.cells=[tiny/vox_lang,tiny/mcp_tool_chain] afk.overrides=[+hw=cpu,logger=csv]
    mens afk                 # default: every cell the ladder says is missing or stale, that fits
    mens afk status | pause | abort

Serial, smallest predicted peak first (mens.afk.cells plans each cell, torch-free). Each item
ensures its base, reads its data, trains in a child (`python -m mens …`, niced, its RSS
watched), gates (`mens gate`) and, with afk.promote, promotes. The queue is a file
(mens.afk.queue): kill it, reboot, run `mens afk` again, and it resumes where it stopped — a
half-trained item from its checkpoint. Layout and states: mens.afk.queue; the loop:
mens.afk.runner; one item's steps: mens.afk.steps; the child and its limits: mens.afk.child.
"""
