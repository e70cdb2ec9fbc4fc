"""The tally JobService as a client that knows it only through server
reflection: the message classes come from the descriptors the server returns."""

import grpc
from google.protobuf import descriptor_pool, message_factory
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)


class JobService:
    """Builds requests and calls of tally.v1.JobService over `channel`."""

    def __init__(self, channel: grpc.Channel):
        self.channel = channel
        database = ProtoReflectionDescriptorDatabase(channel)
        self.services = sorted(database.get_services())
        self.pool = descriptor_pool.DescriptorPool(database)
        self.service = self.pool.FindServiceByName("tally.v1.JobService")

    def message(self, name: str):
        """The class of the message `name` (e.g. "tally.v1.JobSpec")."""
        return message_factory.GetMessageClass(self.pool.FindMessageTypeByName(name))

    def unary(self, method_name: str):
        """The request class of a unary method, and a callable that calls it."""
        method = self.service.FindMethodByName(method_name)
        request_class = message_factory.GetMessageClass(method.input_type)
        response_class = message_factory.GetMessageClass(method.output_type)
        call = self.channel.unary_unary(
            f"/{self.service.full_name}/{method_name}",
            request_serializer=request_class.SerializeToString,
            response_deserializer=response_class.FromString,
        )
        return request_class, call
