"""One rank of a host communicator in its own process: a majority-vote sign all-reduce of fp32
values checked against the vote computed here; the unique id passes through ID_FILE (rank 0
writes it, the others wait for it, at most 30 s). Exit 0 when the result is right, 1 otherwise
(an error, a timeout or a wrong result). scripts/netns_ifname_follow.sh runs it per namespace.

  comm_peer.py RANK NRANKS ID_FILE        (SIGNLION_LIBRARY: the library)"""
import ctypes
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import signlion.capi as capi  # noqa: E402

COUNT = 4099


def value(rank, i):
    """Rank r's element i: signs that differ across ranks and elements."""
    return float(((i * 7 + rank * 3) % 5) - 2)


def main():
    rank, nranks, id_file = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    if rank == 0:
        uid = capi.get_unique_id()
        with open(id_file + ".tmp", "wb") as f:
            f.write(uid)
        os.replace(id_file + ".tmp", id_file)
    else:
        deadline = time.monotonic() + 30
        while not os.path.exists(id_file):
            if time.monotonic() > deadline:
                print("rank %d: no unique id in %s after 30 s" % (rank, id_file))
                return 1
            time.sleep(0.05)
        with open(id_file, "rb") as f:
            uid = f.read()
    comm = capi.Comm(nranks, uid, rank, timeout_ms=4000)
    send = (ctypes.c_float * COUNT)(*[value(rank, i) for i in range(COUNT)])
    recv = (ctypes.c_float * COUNT)()
    comm.sign_all_reduce(ctypes.addressof(send), ctypes.addressof(recv), COUNT, capi.FLOAT32, capi.MAJORITY)
    wrong = 0
    for i in range(COUNT):
        # zero votes +1 (zero rule "positive"); a tie is 0 (tie rule "zero")
        total = sum(1 if value(r, i) >= 0 else -1 for r in range(nranks))
        want = 1.0 if total > 0 else (-1.0 if total < 0 else 0.0)
        wrong += recv[i] != want
    sent, _ = comm.wire_bytes()
    comm.destroy()
    print("rank %d: result %s (%d of %d wrong), %d bytes sent" % (rank, "ok" if not wrong else "WRONG", wrong, COUNT,
                                                                  sent))
    return 0 if wrong == 0 else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except capi.SignError as e:
        print("rank %s: %s" % (sys.argv[1], e))
        sys.exit(1)
