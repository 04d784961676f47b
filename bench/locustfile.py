"""Locust users for the HTTP load test (bench/load_test.py runs them headless against the embedded stack).

    LOAD_API_KEY=... LOAD_QUESTIONS=/path/questions.jsonl \
        .venv/bin/locust -f bench/locustfile.py --headless -u 10 -r 10 -t 30s --host http://127.0.0.1:8000 SearchUser

Three profiles, each a closed loop (a user sends its next request when the answer is in, no think
time): `SearchUser` (POST /api/v1/search/, hybrid, k=10), `AskUser` (POST /api/v1/ask/, whatever
provider the server runs: the load test starts it with the offline one) and `MixedUser` (three
searches to one ask). Questions come from a JSONL file with a "question" field, in a random order
per user. A response other than 200 is a failure.
"""

from __future__ import annotations

import json
import os
import random

from locust import FastHttpUser, constant, task

_QUESTIONS: list[str] = []


def questions() -> list[str]:
    """The questions of LOAD_QUESTIONS (read once per process)."""
    if not _QUESTIONS:
        with open(os.environ["LOAD_QUESTIONS"], encoding="utf-8") as f:
            _QUESTIONS.extend(json.loads(line)["question"] for line in f if line.strip())
    return _QUESTIONS


class _ApiUser(FastHttpUser):
    abstract = True
    wait_time = constant(0)

    def on_start(self) -> None:
        self.headers = {"Authorization": f"Bearer {os.environ['LOAD_API_KEY']}", "Content-Type": "application/json"}
        self.rng = random.Random()

    def _post(self, path: str, body: dict, name: str) -> None:
        with self.client.post(path, data=json.dumps(body), headers=self.headers, name=name, catch_response=True) as r:
            if r.status_code != 200:
                r.failure(f"HTTP {r.status_code}: {(r.text or '')[:200]}")

    def search(self) -> None:
        self._post("/api/v1/search/", {"query": self.rng.choice(questions()), "k": 10, "mode": "hybrid"}, "search")

    def ask(self) -> None:
        self._post("/api/v1/ask/", {"question": self.rng.choice(questions()), "strategy": "auto"}, "ask")


class SearchUser(_ApiUser):
    @task
    def run_search(self) -> None:
        self.search()


class AskUser(_ApiUser):
    @task
    def run_ask(self) -> None:
        self.ask()


class MixedUser(_ApiUser):
    @task(3)
    def run_search(self) -> None:
        self.search()

    @task(1)
    def run_ask(self) -> None:
        self.ask()
