"""A user of a shared coordinator, through grpcio and server reflection only.

Usage: users_client.py HOST:PORT TOKEN OTHERS_JOB_ID

With the user's bearer token on every call (reflection's too), it asks who it
is, submits a kayles job of its own, and tries to cancel another user's job
and to read its events. Prints one JSON line with what it saw: its name, its
job's owner, and the status code of each call on the other's job.
"""

import json
import sys

import grpc

from job_service import JobService


class Bearer(grpc.UnaryUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    """Adds `authorization: Bearer TOKEN` to every call."""

    def __init__(self, token):
        self.header = ("authorization", f"Bearer {token}")

    def _details(self, details):
        metadata = list(details.metadata or []) + [self.header]
        return details._replace(metadata=metadata)

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._details(details), request)

    def intercept_stream_stream(self, continuation, details, requests):
        return continuation(self._details(details), requests)


def main(target: str, token: str, others_job: str) -> None:
    channel = grpc.intercept_channel(grpc.insecure_channel(target), Bearer(token))
    api = JobService(channel)
    unary = api.unary

    def code_of(call, request):
        try:
            call(request, timeout=20)
            return "OK"
        except grpc.RpcError as error:
            return error.code().name

    whoami_request, whoami = unary("WhoAmI")
    me = whoami(whoami_request(), timeout=20)

    submit_request, submit = unary("Submit")
    spec = api.message("tally.v1.JobSpec")()
    spec.kayles.pins = 20
    spec.kayles.digits = 9
    mine = submit(submit_request(spec=spec, idempotency_key="python-user"), timeout=20).job

    cancel_request, cancel = unary("Cancel")
    events_request, events = unary("Events")
    print(
        json.dumps(
            {
                "name": me.name,
                "role": me.role,
                "weight": me.weight,
                "own_job_owner": mine.owner,
                "cancel_others": code_of(cancel, cancel_request(job_id=others_job)),
                "events_of_others": code_of(events, events_request(job_id=others_job)),
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
