"""The audit of ``bench/partitions.py``: what every ``every`` follower got against the
publisher's log (lost, duplicated, reordered), what each ``latest`` view held once healed, and
what each MQTT client got against what was published."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fanout.publisher.log import SqliteLog
from fanout.testing import followers as flat_followers
from fanout.testing.audit import Rows, audit, latest_differences
from fanout.testing.clusterview import Follower as MapFollower
from partitionmqtt import MqttClient, mqtt_audit


def audits(
    log: Path,
    every: list[flat_followers.Follower | MapFollower],
    latest_at: list[tuple[flat_followers.Follower, int, Rows | None]],
    mqtt: dict[str, list[MqttClient]],
    sent: dict[str, int],
) -> dict[str, Any]:
    """The audit of a run.

    Args:
        log: the publisher's log.
        every: the ``every`` followers.
        latest_at: what each ``latest`` view held once healed: (its every follower, seq,
            rows or None if the view had ended).
        mqtt: the MQTT clients at b and c: ``q1``, ``q2`` (persistent), ``shared``.
        sent: messages published per topic.
    """
    totals = {"lost": 0, "duplicated": 0, "reordered": 0, "mismatched": 0, "delivered": 0}
    latest = {"checked": 0, "differing": 0, "ended": 0, "unchecked": 0}
    problems: list[str] = []
    with SqliteLog(log) as stored:
        for follower in every:
            snapshots = [(seq, held) for f, seq, held in latest_at if f is follower]
            found = audit(
                follower.updates,
                follower.box,
                key="id",
                index=("x", "y"),
                log=stored,
                dataset="agents",
                at={seq for seq, _ in snapshots},
            )
            for name in totals:
                totals[name] += getattr(found, name)
            for seq, held in snapshots:
                expected = found.rows_at.get(seq)
                if held is None or expected is None:  # ended, or no update of the seq
                    latest["ended" if held is None else "unchecked"] += 1
                    continue
                latest["checked"] += 1
                if differences := latest_differences(held, expected):
                    latest["differing"] += 1
                    problems.append(f"{follower.box} at seq {seq}: {'; '.join(differences)}")
    mqtt_found = {"lost": 0, "duplicated": 0, "reordered": 0}
    q2_duplicates = 0
    by_client: dict[str, Any] = {}
    for clients, topic, qos in ((mqtt["q1"], "q1/a", 1), (mqtt["q2"], "q2/a", 2)):
        for at, client in zip(("b", "c"), clients, strict=True):
            got = mqtt_audit(client.received(), {topic: sent[topic]}, qos)
            if got["lost"] or got["duplicated"] or got["reordered"]:
                by_client[f"{topic} at {at}"] = got
            mqtt_found["lost"] += got["lost"]
            mqtt_found["reordered"] += got["reordered"]
            q2_duplicates += got["duplicated"]
    shared = [t for c in mqtt["shared"] for t in c.received()]
    shared_lost = mqtt_audit(shared, {"q1/a": sent["q1/a"]}, 1)["lost"]
    return {
        "every": totals,
        "mqtt": mqtt_found,
        "mqtt_problems": by_client,
        "qos2_duplicates": q2_duplicates,
        "share_lost": shared_lost,
        "latest_views": latest | {"problems": problems[:10]},
        "mqtt_sent": dict(sent),
    }
