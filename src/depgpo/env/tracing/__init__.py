"""The syscall tracer: strace's flags, the trace's syntax, the streaming parser and what it records."""
