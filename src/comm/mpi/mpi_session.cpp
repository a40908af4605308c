#include "comm/mpi/mpi_session.h"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>

#include "core/error.h"

namespace splash {

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(v)) return true;
  return false;
}

MpiSession::MpiSession() {
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
    fail_internal("MPI_Init_thread failed");
  if (provided < MPI_THREAD_MULTIPLE) {
    MPI_Finalize();
    fail("this MPI library lacks MPI_THREAD_MULTIPLE, which splash's rank threads need (Debian's Open MPI has it)");
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
}

MpiSession::~MpiSession() { MPI_Finalize(); }

void MpiSession::abort_job(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // MPI_Abort does not return; this says so to the compiler
}

}  // namespace splash
