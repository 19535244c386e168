"""Beyond this machine: cloud offers planned by the same planner (mens cloud estimate), a
SkyPilot task for the chosen one (mens cloud launch), the offers catalogue (mens cloud catalog
refresh). Planning only: no torch; the recommendation memo that reads its estimates is
mens.recommend."""
