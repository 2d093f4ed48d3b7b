"""The prefix cache's disk tier (--cache-disk): conversations outlive a restart and a SIGKILL, and every
fault of its files (a corrupt or truncated file, a writer killed mid-write, a folder gone, writes
that fail, another model's files) ends in the prompt computed instead: never a wrong answer, the
server running on. One host-tier entry fits in memory (--cache-ram 0.02: ~18 MiB of an 800-token
conversation), two streams and no holders, so conversations leave memory for the disk."""
import glob
import os
import resource
import shutil
import signal
import socket
import threading
import time

import httpx

from conftest import Server

ARGS = ("--max-num-seqs", "2", "--prefix-cache-streams", "0", "--cache-ram", "0.02", "--temp", "0")
WORDS = "river stone garden lamp window cloud paper market bridge candle forest tower".split()
PROMPTS = [" ".join(f"{WORDS[(i * 7 + k * 5) % 12]}{k % 17}" for k in range(330)) + f" Story {i}:" for i in range(4)]


def ask(s, p, text=False):
    r = httpx.post(s.url + "/v1/completions", timeout=120,
                   json={"prompt": p, "max_tokens": 16, "logprobs": 5, "ignore_eos": True})
    assert r.status_code == 200, r.text
    c = r.json()["choices"][0]
    got = (c["logprobs"]["tokens"], c["logprobs"]["token_logprobs"])
    return (got, r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]) + ((c["text"],) if text else ())


def files(d):
    return sorted(glob.glob(os.path.join(d, "*", "*.cbkv")))


def disk(m, name):
    return m[f"cobatch:disk_cache_{name}"]


def remove_under_writer(d):
    """Removes a folder a running server may be writing into: a write in flight renames or adds a
    file during the walk, so the walk runs again until the folder is gone."""
    for _ in range(100):
        shutil.rmtree(d, ignore_errors=True)
        if not os.path.exists(d):
            return
        time.sleep(0.05)
    assert not os.path.exists(d), os.listdir(d)


def limit_files():
    """A full disk, as a writer sees it: a file past 8 MiB cannot grow (EFBIG, the signal ignored)."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (8 << 20, 8 << 20))


def test_disk_tier_survives_restarts_and_faults(tmp_path):
    d = str(tmp_path / "kv")
    # 1. written through, and on a drain the streams' conversations too
    s = Server(*ARGS, "--cache-disk", d)
    try:
        cold = [ask(s, p)[0] for p in PROMPTS]
        again, cached = ask(s, PROMPTS[0])  # it left the streams and host memory: read back from disk
        m = s.metrics()
    finally:
        assert s.stop() == 0, s.logs()
    assert again == cold[0] and cached > 600
    assert disk(m, "reads_total") == 1 and m["cobatch:prefix_cache_disk_hits_total"] == cached
    assert disk(m, "failures_total") == 0 and disk(m, "writes_total") >= 2
    saved = files(d)
    assert len(saved) == 4, saved  # each conversation once: the drain saved the two streams' too
    assert open(glob.glob(os.path.join(d, "*", "FINGERPRINT"))[0]).read().startswith("cobatch KV files")

    # 2. a restart serves them all from disk, but a corrupt file (a byte of its cells flipped: the
    # checksum fails, it is removed) and a truncated one (removed at start, never indexed); a dead
    # writer's temporary file (unlocked) is removed at start
    with open(saved[0], "r+b") as f:
        f.seek(-100, os.SEEK_END)
        b = f.read(1)
        f.seek(-100, os.SEEK_END)
        f.write(bytes([b[0] ^ 0x5A]))
    os.truncate(saved[1], os.path.getsize(saved[1]) // 2)
    stale = os.path.join(os.path.dirname(saved[0]), f".tmp-{socket.gethostname().replace('-', '_')}-99999999-1")
    open(stale, "wb").write(b"x" * 1000)
    s = Server(*ARGS, "--cache-disk", d)
    try:
        m0 = s.metrics()
        truncated_left = os.path.exists(saved[1])
        got = [ask(s, p) for p in PROMPTS]
        m = s.metrics()
        # 3. the folder vanishes under a running server: the conversation only on disk is computed
        remove_under_writer(d)
        last = ask(s, PROMPTS[0])  # (PROMPTS[0] left memory for the three after it)
        m2 = s.metrics()
    finally:
        assert s.stop() == 0, s.logs()
    assert disk(m0, "entries") == 3 and not os.path.exists(stale) and not truncated_left
    assert [g[0] for g in got] == cold and last[0] == cold[0]
    assert disk(m, "reads_total") == 2 and disk(m, "failures_total") == 1
    assert sum(g[1] > 600 for g in got) == 2
    assert m2["cobatch:prefix_cache_disk_hits_total"] == m["cobatch:prefix_cache_disk_hits_total"]
    assert disk(m2, "failures_total") > disk(m, "failures_total")

    # 4. SIGKILL right after the answers, writes in flight: what is there reads whole, the killed
    # writer's temporary files go at the next start
    s = Server(*ARGS, "--cache-disk", d)
    try:
        assert [ask(s, p)[0] for p in PROMPTS] == cold
    finally:
        s.proc.send_signal(signal.SIGKILL)
        s.stop()
    s = Server(*ARGS, "--cache-disk", d)
    try:
        got = [ask(s, p) for p in PROMPTS]
        m = s.metrics()
    finally:
        assert s.stop() == 0, s.logs()
    assert [g[0] for g in got] == cold
    assert disk(m, "failures_total") == 0 and disk(m, "reads_total") >= 1
    assert not glob.glob(os.path.join(d, "*", ".tmp-*"))

    # 5. another cache type is another fingerprint: nothing of the folder's is loaded; its files
    # cannot be written (a full disk): computed, the server running on (f32 cells: room for one in
    # memory)
    s = Server(*ARGS, "--cache-disk", d, "-ctk", "f32", "-ctv", "f32", "--cache-ram", "0.05", preexec=limit_files)
    try:
        m0 = s.metrics()
        first = [ask(s, p)[0] for p in PROMPTS]
        again = ask(s, PROMPTS[0])
        m = s.metrics()
    finally:
        assert s.stop() == 0, s.logs()
    assert disk(m0, "entries") == 0 and len(glob.glob(os.path.join(d, "*", "FINGERPRINT"))) == 2
    assert again[0] == first[0] and again[1] == 0  # computed again: never written
    assert disk(m, "failures_total") >= 2 and disk(m, "writes_total") == 0 and disk(m, "reads_total") == 0


def test_disk_tier_shared_by_replicas(tmp_path):
    """Two servers on one folder: a session's next turn on the other replica reads its history from
    the disk (written when its turn ended, found by the other's rescan), and answers as the replica
    that served it before; both writing the same conversations at once leave every file whole."""
    d = str(tmp_path / "kv")
    # one thread each: two servers' OpenMP threads on two cores would wait on each other (and the
    # third server too: the thread count changes ggml's sums, so its answers are compared in kind)
    one = (*ARGS, "--cache-disk", d, "-t", "1")
    a, b = Server(*one), Server(*one)
    try:
        first = [ask(a, p, text=True) for p in PROMPTS[:2]]
        nexts = [p + f[2] + " And then," for p, f in zip(PROMPTS, first)]
        time.sleep(1)  # the writes end, b's rescan comes (at most every 250 ms, when the folder changed)
        moved = ask(b, nexts[0])
        mb = b.metrics()
        stayed = ask(a, nexts[0])
        assert moved[0] == stayed[0]
        assert moved[1] > 600 and mb["cobatch:prefix_cache_disk_hits_total"] == moved[1]
        both = [None, None]
        ts = [threading.Thread(target=lambda i=i, s=s: both.__setitem__(i, [ask(s, p)[0] for p in PROMPTS[2:]]))
              for i, s in enumerate((a, b))]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert both[0] == both[1]
    finally:
        assert a.stop() == 0, a.logs()
        assert b.stop() == 0, b.logs()
    c = Server(*one)
    try:
        m0 = c.metrics()
        got = [ask(c, p)[0] for p in PROMPTS[2:]]
        m = c.metrics()
    finally:
        assert c.stop() == 0, c.logs()
    assert got == both[0]
    assert disk(m0, "entries") >= 4 and disk(m, "reads_total") >= 1 and disk(m, "failures_total") == 0


ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SWA_MODEL = os.environ.get("COBATCH_SWA_MODEL") or os.path.join(ROOT, "models", "gemma-3-270m-q4_k_m.gguf")
# Five layers in six of Gemma 3 270M attend to the last 512 positions only; llama.cpp saves a
# sequence without the cells that window has passed. Its base GGUF has no chat template.
SWA_ARGS = ("-m", SWA_MODEL, "--chat-template", os.path.join(ROOT, "templates", "gemma.jinja"), "--temp", "0",
            "--max-num-seqs", "2", "--prefix-cache-streams", "0", "--cache-ram", "0.012")
LOG = [" ".join(f"{WORDS[(i * 5 + k * 3) % 12]}{k % 23}" for k in range(300)) for i in range(3)]


def chat(s, messages):
    r = httpx.post(s.url + "/v1/chat/completions", timeout=120,
                   json={"messages": messages, "max_tokens": 12, "logprobs": True, "top_logprobs": 2})
    assert r.status_code == 200, r.text
    c = r.json()["choices"][0]
    got = [(t["token"], t["logprob"], [a["logprob"] for a in t["top_logprobs"]]) for t in c["logprobs"]["content"]]
    return got, r.json()["usage"]["prompt_tokens_details"]["cached_tokens"], c["message"]["content"]


def test_sliding_window_conversations_outlive_a_restart(tmp_path):
    """A sliding-window model's conversations live in the host and disk tiers too. An entry holds only
    the cells its window still reads, so it serves a request that continues all of it (an agent's
    next turn) and nothing shorter: a request sharing less is computed, never served from cells that
    are not there. Answers compared token for token and log-probability for log-probability: a turn
    continued from disk after a restart answers as the same turn continued in the first server, and
    a prompt sharing a shorter prefix answers as it did cold."""
    assert os.path.exists(SWA_MODEL), f"{SWA_MODEL} is missing: `make model-swa` fetches it"
    d = str(tmp_path / "kv")
    branch = [{"role": "user", "content": LOG[0][: len(LOG[0]) * 3 // 4] + "\nWhich word comes most often?"}]
    first = [[{"role": "user", "content": LOG[i] + "\nWhat happened here?"}] for i in range(3)]
    s = Server(*SWA_ARGS, "--cache-disk", d)
    try:
        branch_cold, cached, _ = chat(s, branch)
        assert cached == 0
        second = []
        for m in first:  # three conversations on two streams and a host tier of about one
            _, _, text = chat(s, m)
            second.append(m + [{"role": "assistant", "content": text},
                               {"role": "user", "content": "Now list every word that appears in it once, in "
                                                           "the order it first appears, and say how many words "
                                                           "the log holds in all, counting repeats. Then name the "
                                                           "one that comes last and the one that comes first."}])
        before = [chat(s, m)[:2] for m in second]
    finally:
        assert s.stop() == 0, s.logs()
    assert all(c > 600 for _, c in before), [c for _, c in before]  # each continued its first turn's cells
    s = Server(*SWA_ARGS, "--cache-disk", d)
    try:
        # it shares ~580 tokens with a saved conversation and is one (both past the 512-token window)
        again, cached, _ = chat(s, branch)
        assert cached == 0 and again == branch_cold
        after = [chat(s, m)[:2] for m in second]
        m = s.metrics()
    finally:
        assert s.stop() == 0, s.logs()
    assert after == before  # the same cells, read back from disk
    assert m["cobatch:prefix_cache_disk_hits_total"] == sum(c for _, c in after)
    assert m["cobatch:host_cache_failures_total"] == 0 and disk(m, "failures_total") == 0
