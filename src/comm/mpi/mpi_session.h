#pragma once
// MPI for the length of one command: initialised with MPI_THREAD_MULTIPLE (every rank thread sends and
// receives on its own), finalised at the end, or the whole job ended with MPI_Abort when a process was
// lost (finalising waits for every process, and a lost one never comes).
namespace splash {

// Whether an MPI launcher (mpirun of Open MPI or MPICH, or srun with PMI) started this process.
bool launched_by_mpi();

class MpiSession {
 public:
  MpiSession();  // fails when the MPI library lacks MPI_THREAD_MULTIPLE
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // Ends every process of the job with `code` (mpirun then exits non-zero).
  [[noreturn]] void abort_job(int code);

 private:
  int rank_ = 0, size_ = 1;
};

}  // namespace splash
