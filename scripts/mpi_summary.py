"""What the MPI checks (scripts/mpi_check.sh, mpi_gpu_check.sh,
mpi_remote_check.sh) read from examples/mpi_train's output: each rank's
summary line, and the sum of mixed sample indices that tells whether the
ranks' shards are disjoint and cover the set (mpi_train's index_sum).

    PYTHONPATH=scripts python3 - ... <<'PY'
    from mpi_summary import M, mix, summaries, index_sum, want_sum
"""
M = (1 << 64) - 1


def mix(x):
    """splitmix64's finaliser, as mpi_train mixes each sample index."""
    z = (x + 0x9e3779b97f4a7c15) & M
    z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & M
    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & M
    return z ^ (z >> 31)


def summaries(lines):
    """{rank: {key: value}} of the "mpi_train: summary k=v ..." lines."""
    ranks = {}
    for line in lines:
        if line.startswith("mpi_train: summary "):
            kv = dict(f.split("=", 1) for f in line.split()[2:])
            ranks[int(kv["rank"])] = kv
    return ranks


def index_sum(ranks):
    """The job's index_sum: every rank's, added mod 2^64."""
    return sum(int(kv["index_sum"], 16) for kv in ranks.values()) & M


def want_sum(n, epochs):
    """index_sum of `epochs` epochs that read samples 0 .. n-1 once each."""
    return epochs * sum(mix(i) for i in range(n)) & M
