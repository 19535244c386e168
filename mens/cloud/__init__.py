"""Beyond this machine: cloud offers planned by the same planner (mens cloud estimate), a
SkyPilot task for the chosen one (mens cloud launch), the offers catalogue (mens cloud catalog
refresh), and the recommendation memo for one machine (mens recommend). Planning only: no torch."""
