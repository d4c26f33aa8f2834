"""The console's progress lines ("epoch 1  step 12/56  loss 0.4121  2210 samples/s  ETA 3 s")
as a progress bar where a notebook shows one (an IPython kernel with tqdm), and as the
lines themselves elsewhere."""
import re
import sys

_LINE = re.compile(r"^epoch (\d+)\s+step (\d+)/(\d+)\s+loss (\S+)\s+(\d+) samples/s")


def parse(line: str):
    """(epoch, step, steps, loss, samples_per_second) of a progress line, else None."""
    m = _LINE.match(line.strip())
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3)), float(m.group(4)), float(m.group(5))


class Progress:
    """Takes the command's output line by line: in a notebook, progress lines move one bar
    per epoch and every other line is printed; elsewhere every line is printed as it came."""

    def __init__(self):
        self.bar, self.epoch = None, None
        self.notebook = "ipykernel" in sys.modules
        if self.notebook:
            try:
                from tqdm.auto import tqdm
                self.tqdm = tqdm
            except ImportError:
                self.notebook = False

    def line(self, text: str):
        progress = parse(text) if self.notebook else None
        if progress is None:
            sys.stdout.write(text)
            sys.stdout.flush()
            return
        epoch, step, steps, loss, rate = progress
        if self.bar is None or epoch != self.epoch:
            self.close()
            self.bar, self.epoch = self.tqdm(total=steps, desc=f"epoch {epoch}", unit="step"), epoch
        self.bar.update(step - self.bar.n)
        self.bar.set_postfix(loss=f"{loss:.4f}", samples_per_s=f"{rate:.0f}")

    def close(self):
        if self.bar is not None:
            self.bar.close()
            self.bar = None
