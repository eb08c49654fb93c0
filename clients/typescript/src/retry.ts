// Reading a refusal's google.rpc.RetryInfo: a server's rate limit refuses a
// batch or a call with RESOURCE_EXHAUSTED and says, in the
// grpc-status-details-bin trailer (a serialized google.rpc.Status whose
// details are Anys), when to send it again.
//
// The messages are decoded with @bufbuild/protobuf's BinaryReader, the
// runtime of the package's ts-proto stubs, and the generated
// google.protobuf.Duration; only the fields read here are decoded, the rest
// skipped:
//   google.rpc.Status    { int32 code = 1; string message = 2; repeated google.protobuf.Any details = 3; }
//   google.protobuf.Any  { string type_url = 1; bytes value = 2; }
//   google.rpc.RetryInfo { google.protobuf.Duration retry_delay = 1; }

import type * as grpc from "@grpc/grpc-js";
import { BinaryReader, WireType } from "@bufbuild/protobuf/wire";
import { Duration } from "./gen/google/protobuf/duration.js";

const DETAILS_TRAILER = "grpc-status-details-bin";
const RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo";

/** The delay, in milliseconds, of the google.rpc.RetryInfo among the status
 * details in trailers, or undefined when there is none (or it is
 * malformed). */
export function retryDelayOf(trailers: grpc.Metadata | undefined): number | undefined {
  for (const v of trailers?.get(DETAILS_TRAILER) ?? []) {
    if (typeof v === "string") continue; // a -bin key's values are Buffers
    try {
      const d = retryInfoDelay(v);
      if (d !== undefined) return d;
    } catch {
      // Malformed details say nothing about when to retry.
    }
  }
  return undefined;
}

function retryInfoDelay(status: Uint8Array): number | undefined {
  for (const any of fields(status, 3)) {
    let typeUrl = "";
    let value: Uint8Array | undefined;
    const r = new BinaryReader(any);
    while (r.pos < r.len) {
      const [field, wire] = r.tag();
      if (field === 1 && wire === WireType.LengthDelimited) typeUrl = r.string();
      else if (field === 2 && wire === WireType.LengthDelimited) value = r.bytes();
      else r.skip(wire, field);
    }
    if (typeUrl !== RETRY_INFO || !value) continue;
    const delay = fields(value, 1).at(-1); // the last of a non-repeated field wins
    if (!delay) return 0;
    const { seconds, nanos } = Duration.decode(delay);
    return Math.max(0, seconds * 1000 + nanos / 1e6);
  }
  return undefined;
}

/** The values of the length-delimited field number n of a message. */
function fields(msg: Uint8Array, n: number): Uint8Array[] {
  const out: Uint8Array[] = [];
  const r = new BinaryReader(msg);
  while (r.pos < r.len) {
    const [field, wire] = r.tag();
    if (field === n && wire === WireType.LengthDelimited) out.push(r.bytes());
    else r.skip(wire, field);
  }
  return out;
}
