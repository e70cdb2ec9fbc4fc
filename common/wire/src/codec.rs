//! The gRPC codec of the tally services: prost's, except that bytes which do
//! not parse as the expected message are INVALID_ARGUMENT rather than prost's
//! INTERNAL. On the coordinator such bytes are the caller's fault, not a
//! server bug, and INTERNAL would invite a retry that cannot help. (The same
//! codec decodes responses on the client side, where a malformed message would
//! come from a broken server; tally's own never sends one.)

use std::marker::PhantomData;

use prost::Message;
use tonic::Status;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

#[derive(Debug, Clone)]
pub struct StrictCodec<T, U> {
    _messages: PhantomData<(T, U)>,
}

impl<T, U> Default for StrictCodec<T, U> {
    fn default() -> Self {
        StrictCodec {
            _messages: PhantomData,
        }
    }
}

impl<T, U> Codec for StrictCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = StrictDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<T, U>::default().encoder()
    }

    fn decoder(&mut self) -> Self::Decoder {
        StrictDecoder(ProstCodec::<T, U>::default().decoder())
    }
}

/// Prost's decoder with parse failures as INVALID_ARGUMENT.
#[derive(Debug, Clone, Default)]
pub struct StrictDecoder<U>(ProstDecoder<U>);

impl<U: Message + Default> Decoder for StrictDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        self.0.decode(buf).map_err(|status| {
            Status::invalid_argument(format!(
                "the message is not a valid {}: {}",
                std::any::type_name::<U>()
                    .rsplit("::")
                    .next()
                    .unwrap_or("message"),
                status.message()
            ))
        })
    }

    fn buffer_settings(&self) -> BufferSettings {
        self.0.buffer_settings()
    }
}
