"""Task images: podman builds, bases bootstrapped from Debian, the wheel cache, the offline tools a verifier gets, what a task needs offline."""
