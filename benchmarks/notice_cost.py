"""CPU per owner notice in the actuator's own code: rendering it (every dialect a channel
speaks) and posting it through a chat robot channel to a robot stand-in on loopback.

    python benchmarks/notice_cost.py [--notices 2000] [--rounds 3]

Each round renders NOTICES notices (English and Chinese in turn) and posts NOTICES/4 of
them through the WeCom channel (`actuator/notifications/channels.py`) to the demo's chat stand-in
(`actuator/demo/sink.py`, answering `errcode 0` as the robot does, one connection per post,
as in `benchmarks/actuator_cases.py`). It runs in a thread of this process; only the calling
thread's CPU is counted (`time.thread_time`). A case's life has two notices (the warning
and the follow-up). Run it in two checkouts to compare them; figures are medians of rounds.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from actuator.demo.sink import Sink  # noqa: E402
from actuator.notifications.channels import WeComChannel  # noqa: E402
from actuator.notifications.messages import Renderer  # noqa: E402
from tests.helpers.notices import BOB, LILEI, NOW, notice  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notices", type=int, default=2000, help="renders per round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    robot = Sink().start()
    channel = WeComChannel(f"{robot.url}/notice")
    renderer, example = Renderer(), notice()
    contacts = (BOB, LILEI)
    for contact in contacts:  # the templates compiled before timing
        assert channel.send(renderer.render(example, contact, NOW), contact).delivered
    render_ms, post_ms = [], []
    for _ in range(args.rounds):
        start = time.thread_time()
        messages = [renderer.render(example, contacts[i % 2], NOW) for i in range(args.notices)]
        render_ms.append((time.thread_time() - start) * 1000 / args.notices)
        posts = max(1, args.notices // 4)
        start = time.thread_time()
        for i in range(posts):
            if not channel.send(messages[i], contacts[i % 2]).delivered:
                raise SystemExit("the robot stand-in refused a notice")
        post_ms.append((time.thread_time() - start) * 1000 / posts)
    robot.stop()
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, load {os.getloadavg()[0]:.2f}; {args.rounds} rounds"
    )
    print("| per notice, CPU of the calling thread | median | range |")
    print("|---|---|---|")
    for what, values in (("render (text, Markdown, Slack)", render_ms), ("post (WeCom)", post_ms)):
        print(
            f"| {what} | {statistics.median(values):.3f} ms "
            f"| {min(values):.3f} to {max(values):.3f} ms |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
