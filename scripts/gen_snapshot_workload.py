"""gen_snapshot.py's traffic: a training loop's allocations and frees (long-lived parameters,
iterations that grow and release activations, occasional empty_cache) driven through the
allocator model until the recording holds exactly the requested number of entries, with the
phase annotations of each recorded iteration.
"""

import bisect
import random

from gen_snapshot_allocator import MIN_BLOCK, ROUND_LARGE, Recording, Simulator, round_size


class Workload:
    """Training-loop-like traffic: long-lived parameters, then iterations that
    grow activations (forward) and release them (backward), with op sites that
    tie a stack pattern to a size, and sizes that drift a little between
    iterations (changing batch shapes cause fragmentation and new segments)."""

    def __init__(self, rng, n_stacks, iteration_allocs):
        self.rng = rng
        self.n_stacks = n_stacks
        self.iteration_allocs = iteration_allocs
        self.site_size = []
        for _ in range(n_stacks):
            r = rng.random()
            if r < 0.05:
                size = rng.choice([4, 8, 16, 64, 128, 256, 400])
            elif r < 0.25:
                size = int(2 ** rng.uniform(9, 20))        # 512 B .. 1 MiB
            elif r < 0.85:
                size = int(2 ** rng.uniform(20, 24.5))     # 1 .. ~23 MiB
            else:
                size = int(2 ** rng.uniform(24.5, 27.3))   # ~23 .. ~160 MiB
            if rng.random() < 0.5:
                size = max(4, size // 4 * 4)
            self.site_size.append(size)
        # Zipf-like popularity over sites.
        self.weights = [1.0 / (i + 1) ** 0.9 for i in range(n_stacks)]
        self.cum = []
        total = 0.0
        for w in self.weights:
            total += w
            self.cum.append(total)
        self.total = total

    def site(self):
        return bisect.bisect_left(self.cum, self.rng.random() * self.total)

    def size_for(self, site, scale):
        return max(1, int(self.site_size[site] * scale))


def simulate(args, frames, stacks):
    rng = random.Random(args.seed + 1)
    n_stacks = len(stacks)
    sim = Simulator(rng, n_stacks, args.fresh_stack_fraction,
                    0x7FD9_0000_0000 + rng.randrange(1 << 20) * ROUND_LARGE, args.context == "all")
    work = Workload(rng, n_stacks, args.iteration_allocs)
    rec = Recording()
    annotations = []
    target = args.entries
    warmup_ops = args.warmup if args.warmup is not None else min(50_000, max(2_000, target // 10))

    params = []
    temps = []  # allocation order, so frees can be LIFO-ish

    # Long-lived "parameters" and "optimizer state", allocated before the
    # window: they appear only in the final segments (and as pre-window frees
    # when the occasional one is released).
    for _ in range(max(50, n_stacks // 20)):
        site = work.site()
        params.append(sim.malloc(work.size_for(site, 1.0), site))

    def entries_left():
        return target - len(rec)

    ops = 0
    recording = False

    def start_recording_if_due():
        # Recording starts in the middle of whatever the program is doing,
        # like _record_memory_history() or a wrapped ring buffer.
        nonlocal recording
        if not recording and ops >= warmup_ops:
            recording = True
            sim.rec = rec
            sim.entries_left = entries_left

    while True:
        start_recording_if_due()
        if recording and len(rec) >= target:
            break

        # One iteration: forward grows the live set, backward shrinks it.
        scale = rng.uniform(0.75, 1.25)
        fwd = int(work.iteration_allocs * rng.uniform(0.8, 1.2))
        it_start = sim.now
        phase_marks = []
        for phase, steps, p_alloc in (("forward", fwd, 0.72), ("backward", fwd, 0.32)):
            phase_marks.append((phase, sim.now))
            for _ in range(steps):
                ops += 1
                start_recording_if_due()
                left = entries_left() if recording else 1 << 60
                if left <= 0:
                    break
                want_alloc = rng.random() < p_alloc or not temps
                if left <= 2:
                    # Finish on exactly the requested count: a free is two
                    # entries, an alloc one (two if it needs a new segment).
                    if left == 2 and temps:
                        want_alloc = False
                    else:
                        site = work.site()
                        size = work.size_for(site, scale)
                        if not sim.fits_cached(round_size(size)):
                            size = 1 if sim.fits_cached(MIN_BLOCK) else size
                        if left == 1 and not sim.fits_cached(round_size(size)):
                            lst = sim.free_sorted[False] or sim.free_sorted[True]
                            if lst:
                                size = lst[-1][0]
                        temps.append(sim.malloc(size, site))
                        continue
                if want_alloc:
                    site = work.site()
                    temps.append(sim.malloc(work.size_for(site, scale), site))
                else:
                    if rng.random() < 0.7:
                        block = temps.pop()
                    else:
                        j = rng.randrange(len(temps))
                        temps[j], temps[-1] = temps[-1], temps[j]
                        block = temps.pop()
                    sim.free(block, work.site())
                if recording and rng.random() < 0.00002 and params and entries_left() > 2:
                    # A long-lived tensor released inside the window.
                    j = rng.randrange(len(params))
                    params[j], params[-1] = params[-1], params[j]
                    sim.free(params.pop(), work.site())
            if recording and entries_left() <= 0:
                break
        if recording:
            end = sim.now
            names = {"forward": "## forward ##", "backward": "## backward ##"}
            for k, (phase, t0) in enumerate(phase_marks):
                t1 = phase_marks[k + 1][1] if k + 1 < len(phase_marks) else end
                annotations.append(("START", names[phase], max(t0, it_start)))
                annotations.append(("END", names[phase], t1))
            # record_function ranges as external_annotations: the optimizer
            # step runs between iterations, so time moves on.
            annotations.append(("START", "Optimizer.step#AdamW.step", end))
            sim.now += rng.randrange(50, 5000)
            annotations.append(("END", "Optimizer.step#AdamW.step", sim.now))
        # Between iterations: the optimizer keeps some outputs alive, and now
        # and then the program calls empty_cache().
        if rng.random() < args.empty_cache_prob and (not recording or entries_left() > 64):
            sim.release_cached(work.site())
        while len(temps) > 40 and (not recording or entries_left() > 2):
            block = temps.pop()
            sim.free(block, work.site())
        if recording and entries_left() <= 0:
            break

    return sim, rec, annotations
