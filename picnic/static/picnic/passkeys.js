// Passkey registration and signing (WebAuthn). No inline scripts: the CSP allows only 'self'.
(function () {
  "use strict";

  function b64urlToBytes(value) {
    const pad = "=".repeat((4 - (value.length % 4)) % 4);
    const raw = atob((value + pad).replace(/-/g, "+").replace(/_/g, "/"));
    return Uint8Array.from(raw, (c) => c.charCodeAt(0));
  }
  function bytesToB64url(buffer) {
    const bytes = new Uint8Array(buffer);
    let raw = "";
    bytes.forEach((b) => { raw += String.fromCharCode(b); });
    return btoa(raw).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  }
  function csrfToken() {
    const match = document.cookie.match(/(?:^|; )csrftoken=([^;]+)/);
    return match ? decodeURIComponent(match[1]) : "";
  }
  async function post(url, body) {
    const response = await fetch(url, {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrfToken() },
      body: body === undefined ? "{}" : JSON.stringify(body),
      credentials: "same-origin",
    });
    const data = await response.json().catch(() => ({}));
    if (!response.ok) throw new Error(data.error || `HTTP ${response.status}`);
    return data;
  }
  function refreshTimeline() {
    if (window.htmx && document.getElementById("timeline")) htmx.trigger("#timeline", "refresh");
  }
  function say(id, text) {
    const el = document.getElementById(id);
    if (el) el.textContent = text;
  }

  async function register(button) {
    say("passkey-result", "Waiting for your passkey…");
    try {
      const options = await post(button.dataset.optionsUrl);
      options.challenge = b64urlToBytes(options.challenge);
      options.user.id = b64urlToBytes(options.user.id);
      (options.excludeCredentials || []).forEach((c) => { c.id = b64urlToBytes(c.id); });
      const credential = await navigator.credentials.create({ publicKey: options });
      const result = await post(button.dataset.verifyUrl, {
        id: credential.id,
        rawId: bytesToB64url(credential.rawId),
        type: credential.type,
        response: {
          clientDataJSON: bytesToB64url(credential.response.clientDataJSON),
          attestationObject: bytesToB64url(credential.response.attestationObject),
          transports: credential.response.getTransports ? credential.response.getTransports() : [],
        },
      });
      say("passkey-result", `Passkey registered. Smart account ${result.smart_account}`);
    } catch (error) {
      say("passkey-result", `Registration failed: ${error.message}`);
    }
  }

  async function approve(button) {
    say("sign-result", "Waiting for your passkey…");
    button.disabled = true;
    try {
      const options = await post(button.dataset.optionsUrl);
      options.challenge = b64urlToBytes(options.challenge);
      (options.allowCredentials || []).forEach((c) => { c.id = b64urlToBytes(c.id); });
      const assertion = await navigator.credentials.get({ publicKey: options });
      const result = await post(button.dataset.approveUrl, {
        id: assertion.id,
        rawId: bytesToB64url(assertion.rawId),
        type: assertion.type,
        response: {
          clientDataJSON: bytesToB64url(assertion.response.clientDataJSON),
          authenticatorData: bytesToB64url(assertion.response.authenticatorData),
          signature: bytesToB64url(assertion.response.signature),
          userHandle: assertion.response.userHandle ? bytesToB64url(assertion.response.userHandle) : null,
        },
      });
      say("sign-result", result.status === "signed" ? "Signed." : `Signed (${result.status}).`);
      refreshTimeline();
    } catch (error) {
      say("sign-result", `Not signed: ${error.message}`);
      button.disabled = false;
    }
  }

  async function reject(button) {
    try {
      await post(button.dataset.rejectUrl);
      say("sign-result", "Rejected.");
      refreshTimeline();
    } catch (error) {
      say("sign-result", `Not rejected: ${error.message}`);
    }
  }

  // Time left to sign: the server renders the milliseconds left in data-ms-left (its clock,
  // so a wrong clock here does not matter); we count down from when the element appeared.
  // At zero the timeline is refreshed once: the server expires the action on read.
  const deadlines = new WeakMap();
  function timeLeftText(seconds) {
    const hours = Math.floor(seconds / 3600);
    const minutes = Math.floor((seconds % 3600) / 60);
    const secs = seconds % 60;
    if (hours) return `${hours} h ${minutes} min`;
    if (minutes) return `${minutes} min ${secs} s`;
    return `${secs} s`;
  }
  function tick() {
    const el = document.getElementById("time-left");
    if (!el || el.dataset.msLeft === undefined) return;
    if (!deadlines.has(el)) deadlines.set(el, performance.now() + Number(el.dataset.msLeft));
    const seconds = Math.max(0, Math.floor((deadlines.get(el) - performance.now()) / 1000));
    const value = el.querySelector(".time-left-value");
    if (value) value.textContent = timeLeftText(seconds);
    if (seconds === 0 && !el.dataset.timeUp) {
      el.dataset.timeUp = "1";
      el.textContent = "Time is up: this request is expiring.";
      const approveButton = document.getElementById("approve");
      if (approveButton) approveButton.disabled = true;
      refreshTimeline();
    }
  }
  setInterval(tick, 250);
  document.addEventListener("DOMContentLoaded", tick);
  document.addEventListener("htmx:afterSwap", tick);

  document.addEventListener("click", (event) => {
    const target = event.target.closest("button");
    if (!target) return;
    if (target.id === "register-passkey") register(target);
    if (target.id === "approve") approve(target);
    if (target.id === "reject") reject(target);
  });
})();
