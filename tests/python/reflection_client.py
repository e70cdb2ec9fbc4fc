"""A gRPC client that knows tally only through server reflection.

Usage: reflection_client.py HOST:PORT

It lists the services, builds the message classes from the descriptors the
server returns, submits a kayles job, waits for it and prints one JSON line
with what it saw.
"""

import json
import sys
import time

import grpc

from job_service import JobService


def main(target: str) -> None:
    channel = grpc.insecure_channel(target)
    api = JobService(channel)
    services, pool, message, unary = api.services, api.pool, api.message, api.unary

    submit_request, submit = unary("Submit")
    spec = message("tally.v1.JobSpec")()
    spec.kayles.pins = 20
    spec.kayles.digits = 9
    response = submit(submit_request(spec=spec, idempotency_key="python-client"))
    job_id = response.job.id

    get_request, get = unary("Get")
    deadline = time.time() + 30
    job = get(get_request(job_id=job_id))
    states = pool.FindEnumTypeByName("tally.v1.JobState")
    while states.values_by_number[job.state].name not in (
        "JOB_STATE_SUCCEEDED",
        "JOB_STATE_FAILED",
        "JOB_STATE_CANCELLED",
    ):
        if time.time() > deadline:
            raise SystemExit(f"job {job_id} did not finish")
        time.sleep(0.1)
        job = get(get_request(job_id=job_id))

    print(
        json.dumps(
            {
                "services": services,
                "job_id": job_id,
                "state": states.values_by_number[job.state].name,
                "answer": job.answer,
                "shards_done": job.shards_done,
                "shards_total": job.shards_total,
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1])
