"""`depgpo data check`: what a task needs that an episode here cannot give."""
