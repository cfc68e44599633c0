// The integrator's side, written against the types openapi-typescript generates from the
// service's /openapi.json (./schema.d.ts, made by tests/test_generated_clients.py) and the
// openapi-fetch client. Checked with `tsc --noEmit --strict`: no casts, no `any`.
// Storage URLs get a plain fetch (no bearer token goes there); the recording endpoint is
// asked with redirect: "manual" (its answer is a 302 to the recording, not JSON).
//
//   node drive.js BASE_URL TOKEN CLINIC PDF CALL_SID RECORDING_URL
import { readFileSync } from "node:fs";
import createClient from "openapi-fetch";
import type { components, paths } from "./schema.js";

type PatientImport = components["schemas"]["PatientImport"];
type RecordingState = components["schemas"]["RecordingState"];

const [baseUrl, token, clinicSlug, pdfPath, callSid, recordingUrl] = process.argv.slice(2);
const api = createClient<paths>({ baseUrl, headers: { Authorization: `Bearer ${token}` } });
const CLINIC = "/external/v1/clinics/{clinicSlug}";
const inClinic = { path: { clinicSlug } };

function must<T>(step: string, answer: { data?: T; error?: unknown }): T {
  if (answer.data === undefined) {
    throw new Error(`${step}: unexpected answer ${JSON.stringify(answer.error)}`);
  }
  return answer.data;
}

// Where the token stands on one budget, read off an answer's metadata (`answer.response.headers`:
// openapi-fetch hands over the headers, not parsed): the RateLimit-Policy (`"writes";q=600;w=60`)
// and RateLimit (`"writes";r=597;t=1`) fields of an answer to a counted write. The same shape as
// a 429's `error.rateLimit`.
type RateLimitStanding = components["schemas"]["RateLimitStanding"];
function rateLimit(headers: Headers): RateLimitStanding {
  const [policy, ...quota] = (headers.get("RateLimit-Policy") ?? "").split(";");
  const [, ...left] = (headers.get("RateLimit") ?? "").split(";");
  const n = new Map([...quota, ...left].map((part) => [part[0], Number(part.slice(2))]));
  const at = (key: string): number => {
    const value = n.get(key);
    if (value === undefined) throw new Error(`no ${key} in the RateLimit fields`);
    return value;
  };
  return { policy: policy.replaceAll('"', ""), limit: at("q"), window: at("w"), remaining: at("r"), reset: at("t") };
}

function remaining(headers: Headers): number {
  return rateLimit(headers).remaining;
}

const sleep = (seconds: number) => new Promise((resolve) => setTimeout(resolve, seconds * 1000));

function recordingLink(recording: RecordingState): string | null {
  return recording.state === "available" ? recording.url : null; // narrowed by the `state` discriminator
}

async function main(): Promise<void> {
  // --- switchboard: the three routing checks and the hand-off ------------------------
  const opened = must("is-clinic-opened", await api.POST(`${CLINIC}/switchboard/is-clinic-opened`, { params: inClinic }));
  const vacation = must("is-on-vacation",
    await api.POST(`${CLINIC}/switchboard/is-on-vacation`, { params: inClinic, body: {} }));
  const active = must("has-active-request", await api.POST(`${CLINIC}/switchboard/has-active-request`,
    { params: inClinic, body: { callFrom: "+420 601 123 456" } }));
  console.log(`checks: open=${opened.isOpen} vacation=${vacation.isOnVacation} active=${active.hasActiveRequest}`);
  const handedAnswer = await api.POST(`${CLINIC}/switchboard/recording-complete`, {
    params: inClinic,
    body: {
      CallSid: callSid, CallFrom: "+420 601 123 456", CallTo: "+420 200 000 000", HasRecording: true,
      RecordingUrl: recordingUrl, RecordingSid: recordingUrl.split("/").pop() ?? null, Source: "generated-client",
    },
  });
  const handed = must("recording-complete", handedAnswer);
  console.log(`hand-off: success=${handed.success}`);

  // --- signed documents, steps 1-7 -------------------------------------------------
  const types = must("1", await api.POST(`${CLINIC}/patientRequestTypes/search`, { params: inClinic }));
  const consent = types.data.find((t) => t.ecrfId === "SIGNED_CONSENT");
  if (!consent) throw new Error("1: no SIGNED_CONSENT type");
  console.log(`1. type: ${consent.name} requiresSignature=${consent.requiresSignature}`);

  const found = must("2", await api.POST(`${CLINIC}/patients/search`, {
    params: inClinic, body: { filter: { externalId: "EXT-1", externalIdSource: "signing-system" } },
  }));
  const patient = found.data.find((p) => p.isInClinic);
  if (!patient) throw new Error("2: no patient with a record here");
  console.log(`2. patient: ${patient.firstName} ${patient.lastName} tags=${patient.tags.map((t) => t.name)} ` +
    `externalIds=${patient.externalIds.map((e) => `${e.source}:${e.id}`)} next=${found.pagination.nextCursor}`);

  const one: PatientImport = { externalId: "GEN-TS-1", externalIdSource: "signing-system", firstName: "Eva",
    lastName: "Dvořáková" };
  const importedAnswer = await api.POST(`${CLINIC}/patients/import`, { params: inClinic, body: one });
  const imported = must("import", importedAnswer);
  const bulkAnswer = await api.POST(`${CLINIC}/patients/import-bulk`, {
    params: inClinic,
    body: { patients: [{ externalId: "GEN-TS-2", firstName: "Adam", lastName: "Beneš", phone: "+420 603 111 222" },
      { externalId: "GEN-TS-3", firstName: "Běla", lastName: "Černá", phone: "not a phone" }] },
  });
  const bulk = must("import-bulk", bulkAnswer);
  // The failed item's field, read from `param` (never from the message).
  const failed = bulk.data.filter((item) => item.error !== null)
    .map((item) => `${item.index}:${item.error?.code}:${item.error?.param}`);
  console.log(`import: created=${imported.data.created} bulk=${bulk.data.map((item) => item.status)} failed=${failed}`);
  // Where the token stands on its budgets: the RateLimit fields of each counted write.
  const left = [importedAnswer, bulkAnswer].map((a) => remaining(a.response.headers));
  console.log(`rate limits: ${handedAnswer.response.headers.get("RateLimit-Policy")} ` +
    `${importedAnswer.response.headers.get("RateLimit-Policy")} counting down=${left[1] < left[0]}`);

  // Every write sent with an Idempotency-Key: a retry with the same key (after a timeout,
  // say) is answered the first answer and writes nothing again.
  const creation = {
    params: { ...inClinic, header: { "Idempotency-Key": crypto.randomUUID() } },
    body: { patientId: patient.id, userECRFId: consent.id, userNote: "Signed consent, version 3" },
  };
  const created = must("3", await api.POST(`${CLINIC}/patientRequests/create`, creation));
  const request = created.data;
  console.log(`3. request: ${request.title} kind=${request.kind} doneAt=${request.doneAt}`);
  const again = must("3 again", await api.POST(`${CLINIC}/patientRequests/create`, creation));
  console.log(`3. retried with its Idempotency-Key: same request=${again.data.id === request.id}`);
  const inRequest = { path: { clinicSlug, requestId: request.id } };

  const link = must("4", await api.POST(`${CLINIC}/patientRequests/{requestId}/attachments/upload-link`, {
    params: inRequest, body: { contentType: "application/pdf" },
  }));
  console.log("4. upload link issued");

  const pdf = readFileSync(pdfPath);
  const put = await fetch(link.data.url, { method: "PUT", body: pdf, headers: { "Content-Type": "application/pdf" } });
  console.log(`5. upload: ${put.status}`);
  if (!put.ok) throw new Error(`5: ${await put.text()}`);

  const registration = {
    params: { ...inRequest, header: { "Idempotency-Key": crypto.randomUUID() } },
    body: { contentType: "application/pdf" as const, fileHash: link.data.fileHash, description: "signed-consent.pdf",
      categoryType: "CONSENT" as const },
  };
  const registered = must("6", await api.POST(`${CLINIC}/patientRequests/{requestId}/attachments`, registration));
  const againRegistered = must("6 again", await api.POST(`${CLINIC}/patientRequests/{requestId}/attachments`,
    registration));
  if (againRegistered.data.id !== registered.data.id) throw new Error("6: the retry registered another attachment");
  console.log(`6. attachment: ${registered.data.contentType} sha256=${registered.data.sha256}`);

  const detail = must("7", await api.GET(`${CLINIC}/patientRequests/{requestId}`, { params: inRequest }));
  const [record] = detail.data.medicalRecords;
  const downloaded = Buffer.from(await (await fetch(record.downloadUrl)).arrayBuffer());
  const same = downloaded.equals(pdf) ? "identical" : "DIFFERENT";
  console.log(`7. read back: ${downloaded.length} bytes, ${same}; category=${record.categoryType}`);
  if (!downloaded.equals(pdf)) throw new Error("the PDF read back differs from the one uploaded");

  const tags = must("tags", await api.GET(`${CLINIC}/tags`, { params: { ...inClinic, query: { type: "patient_request" } } }));
  const patched = must("patch", await api.PATCH(`${CLINIC}/patientRequests/{requestId}`, {
    params: inRequest, body: { addTagIds: tags.data.map((t) => t.id), done: true },
  }));
  console.log(`patch: tags=${patched.data.tags.map((t) => t.name)} done=${patched.data.doneAt !== null}`);

  // --- the hand-off's request, once the worker made it (bounded wait) ----------------
  const deadline = Date.now() + 120_000;
  let page = must("search", await api.POST(`${CLINIC}/patientRequests/search`, {
    params: inClinic, body: { filter: { kind: "missed_call" } },
  }));
  while (page.data.length === 0 && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 500));
    page = must("search", await api.POST(`${CLINIC}/patientRequests/search`, {
      params: inClinic, body: { filter: { kind: "missed_call" } },
    }));
  }
  const [fromCall] = page.data;
  const inCall = { path: { clinicSlug, requestId: fromCall.id } };
  const callDetail = must("call detail", await api.GET(`${CLINIC}/patientRequests/{requestId}`, { params: inCall }));
  const call = callDetail.data.call;
  if (!call) throw new Error("the request made from a call has no call");
  console.log(`call: sid=${call.callSid} kind=${callDetail.data.kind} transcriptStatus=${call.transcriptStatus} ` +
    `recording=${call.recording.state}`);
  const played = await api.GET(`${CLINIC}/patientRequests/{requestId}/recording`, { params: inCall, redirect: "manual" });
  const location = played.response.headers.get("location");
  console.log(`recording: ${played.response.status} to the call's link=${location === recordingLink(call.recording)}`);

  // --- the writes' budget: whole again, counting down, spent, and back ----------------
  // A probe that is counted but writes nothing: an import whose phone is refused (400).
  const probe = () => api.POST(`${CLINIC}/patients/import`, {
    params: inClinic, body: { externalId: "GEN-TS-PROBE", firstName: "Petr", lastName: "Malý", phone: "not a phone" },
  });
  const waited = rateLimit((await probe()).response.headers).reset;
  await sleep(waited); // the seconds the service says the whole quota takes to come back
  const burst: RateLimitStanding[] = [];
  const at: number[] = [];
  for (let i = 0; i < 3; i++) {
    burst.push(rateLimit((await probe()).response.headers));
    at.push(performance.now() / 1000);
  }
  // Each probe takes one request; the bucket refills `limit` per `window` seconds evenly,
  // so a slow machine sees some back between two answers: at most the refill since the
  // previous answer, rounded up.
  const rate = burst[0].limit / burst[0].window;
  let down = true;
  for (let i = 1; i < burst.length; i++) {
    if (burst[i].remaining > burst[i - 1].remaining - 1 + Math.ceil((at[i] - at[i - 1]) * rate)) down = false;
  }
  console.log(`budget: ${burst[0].policy} whole again after t=${waited > 0} ` +
    `remaining=limit-1=${burst[0].remaining === burst[0].limit - 1} ` +
    `counting down=${down && burst[2].remaining < burst[0].limit}`);
  let refused = await probe();
  for (let i = 0; i < 2 * burst[0].limit && refused.response.status !== 429; i++) refused = await probe();
  const spent = refused.error?.rateLimit;
  if (refused.response.status !== 429 || spent === undefined) {
    throw new Error(`429: unexpected answer ${JSON.stringify(refused.error)}`);
  }
  const fields = rateLimit(refused.response.headers);
  const asItsFields = JSON.stringify([spent.policy, spent.limit, spent.window, spent.remaining, spent.reset]) ===
    JSON.stringify([fields.policy, fields.limit, fields.window, fields.remaining, fields.reset]);
  const retryAfter = Number(refused.response.headers.get("Retry-After"));
  console.log(`429: ${refused.error?.code} policy=${spent.policy} limit=${spent.limit} remaining=${spent.remaining} ` +
    `reset>0=${spent.reset > 0} as its fields=${asItsFields} Retry-After>0=${retryAfter > 0}`);
  await sleep(retryAfter);
  const after = await probe();
  console.log(`after Retry-After: ${after.response.status} ${after.error?.code} ${after.error?.param} ` +
    `counted=${rateLimit(after.response.headers).limit > 0}`);
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
