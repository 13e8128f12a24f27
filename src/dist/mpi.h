// The MPI communicator (Open MPI): set as tern::world() when the process was started by mpirun / mpiexec. Only the
// binaries link this layer (the CLI and the distributed tests); everything else sees core/comm.h.
#pragma once

namespace tern::dist {

// Whether this process was started by an MPI launcher (its environment has the launcher's rank variables).
bool launched_by_mpi();
// MPI_Init, then set_world() to the MPI communicator; finalized at exit. Call at most once, first thing in main.
void init_world(int* argc, char*** argv);

}  // namespace tern::dist
