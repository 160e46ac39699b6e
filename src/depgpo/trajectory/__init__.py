"""The trajectory contract: what one episode did, as every stage reads it (docs/trajectory-schema.md).

The lowest layer of the package: it imports nothing else of depgpo, and everything that makes or reads
trajectories imports it. `schema` holds the record types and the builder, `scope` which paths are records, `load`
the validating field readers (files are read by depgpo.inference.load_trajectories).
"""

from depgpo.trajectory.load import TrajectoryError, check_header
from depgpo.trajectory.schema import (MISSING, SCHEMA_VERSION, CommandEffects, CommandRecord, FileVersion, Trajectory,
                                      empty_effects, make_trajectory, unverified)

__all__ = ["MISSING", "SCHEMA_VERSION", "CommandEffects", "CommandRecord", "FileVersion", "Trajectory",
           "TrajectoryError", "check_header", "empty_effects", "make_trajectory", "unverified"]
