// Passkey registration and signing (WebAuthn). No inline scripts: the CSP allows only 'self'.
// Words come from Django's JavaScript catalogue (/i18n/catalog.js, the page's language); the
// server's refusals arrive already translated in `error`. A browser's own exception text is
// never shown: it is English and names internals.
(function () {
  "use strict";
  const gettext = window.gettext || ((text) => text);

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
  class Refused extends Error {}
  async function post(url, body) {
    let response;
    try {
      response = await fetch(url, {
        method: "POST",
        headers: {
          "Content-Type": "application/json",
          Accept: "application/json",
          "X-CSRFToken": csrfToken(),
        },
        body: body === undefined ? "{}" : JSON.stringify(body),
        credentials: "same-origin",
      });
    } catch (error) {
      throw new Refused(gettext("Picnic could not be reached. Check your connection and try again."));
    }
    const data = await response.json().catch(() => ({}));
    if (!response.ok) {
      throw new Refused(data.error || gettext("Something went wrong on our side. Nothing was signed. Try again in a moment."));
    }
    return data;
  }
  // What went wrong, in the page's language: our server's words, or the WebAuthn error's kind.
  function explain(error, nothingHappened) {
    if (error instanceof Refused) return error.message;
    if (error && error.name === "NotAllowedError") {
      return gettext("You cancelled, or your device did not answer in time.") + " " + nothingHappened;
    }
    if (error && error.name === "InvalidStateError") {
      return gettext("This device already holds a passkey for your account.");
    }
    return gettext("Your device could not use a passkey here.") + " " + nothingHappened;
  }
  function refreshTimeline() {
    if (window.htmx && document.getElementById("timeline")) htmx.trigger("#timeline", "refresh");
  }
  function say(id, text, outcome) {
    const el = document.getElementById(id);
    if (!el) return;
    el.textContent = text;
    if (outcome) el.dataset.outcome = outcome;
  }

  async function register(button) {
    say("passkey-result", gettext("Waiting for your passkey…"), "waiting");
    button.disabled = true;
    try {
      const credential = await createCredential(await post(button.dataset.optionsUrl));
      await post(button.dataset.verifyUrl, attestation(credential));
      say("passkey-result", gettext("Passkey registered."), "registered");
      // The list, its names and the account come from the server: show them (a page that
      // cannot be shown twice, an opened device link, names where to go instead).
      const next = button.dataset.nextUrl;
      window.setTimeout(() => (next ? window.location.assign(next) : window.location.reload()), 800);
    } catch (error) {
      say("passkey-result", explain(error, gettext("No passkey was registered.")), "failed");
      button.disabled = false;
    }
  }

  // A new passkey from the server's creation options (their binary fields in base64url).
  function createCredential(options) {
    options.challenge = b64urlToBytes(options.challenge);
    options.user.id = b64urlToBytes(options.user.id);
    (options.excludeCredentials || []).forEach((c) => { c.id = b64urlToBytes(c.id); });
    return navigator.credentials.create({ publicKey: options });
  }
  // The new passkey as the server's verify views read it (registration, and a recovery's
  // `credential`).
  function attestation(credential) {
    return {
      id: credential.id,
      rawId: bytesToB64url(credential.rawId),
      type: credential.type,
      response: {
        clientDataJSON: bytesToB64url(credential.response.clientDataJSON),
        attestationObject: bytesToB64url(credential.response.attestationObject),
        transports: credential.response.getTransports ? credential.response.getTransports() : [],
      },
    };
  }

  // Recovery: the code travels once, with the new passkey; the server keeps neither.
  async function recover(button) {
    const form = document.getElementById("recover-form");
    const username = form.querySelector("#recover-username").value.trim();
    const code = form.querySelector("#recover-code").value.trim();
    if (!username || !code) {
      say("recover-result", gettext("Enter your username and your recovery code."), "failed");
      return;
    }
    say("recover-result", gettext("Waiting for your passkey…"), "waiting");
    button.disabled = true;
    try {
      const credential = await createCredential(await post(form.dataset.optionsUrl, { username: username }));
      const data = await post(form.dataset.verifyUrl, { code: code, credential: attestation(credential) });
      say("recover-result", data.message, "started");
    } catch (error) {
      say("recover-result", explain(error, gettext("Nothing changed.")), "failed");
      button.disabled = false;
    }
  }

  async function approve(button) {
    say("sign-result", gettext("Waiting for your passkey…"), "waiting");
    button.disabled = true;
    try {
      const options = await post(button.dataset.optionsUrl);
      options.challenge = b64urlToBytes(options.challenge);
      (options.allowCredentials || []).forEach((c) => { c.id = b64urlToBytes(c.id); });
      const assertion = await navigator.credentials.get({ publicKey: options });
      await post(button.dataset.approveUrl, {
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
      say("sign-result", gettext("Signed."), "signed");
      refreshTimeline();
    } catch (error) {
      say("sign-result", explain(error, gettext("Nothing was signed.")), "failed");
      button.disabled = false;
    }
  }

  // Reject asks first: the link opens the confirmation form in place (without JavaScript the
  // link loads the same form); "No" closes it again.
  function showRejectConfirm(show) {
    const form = document.getElementById("reject-confirm");
    const link = document.getElementById("reject");
    if (!form) return;
    form.hidden = !show;
    if (link) link.setAttribute("aria-expanded", String(show));
    if (show) document.getElementById("reject-confirm-heading").focus();
    else if (link) link.focus();
  }

  // Time left to sign: the server renders the milliseconds left in data-ms-left (its clock,
  // so a wrong clock here does not matter); we count down from when the element appeared.
  // At zero the timeline is refreshed once: the server expires the action on read.
  const deadlines = new WeakMap();
  function timeLeftText(seconds) {
    const hours = Math.floor(seconds / 3600);
    const minutes = Math.floor((seconds % 3600) / 60);
    const secs = String(seconds % 60).padStart(2, "0");
    if (hours) return `${hours}:${String(minutes).padStart(2, "0")}:${secs}`;
    return `${minutes}:${secs}`;
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
      el.textContent = gettext("Time is up: this request is expiring.");
      const approveButton = document.getElementById("approve");
      if (approveButton) approveButton.disabled = true;
      refreshTimeline();
    }
  }
  setInterval(tick, 250);
  document.addEventListener("DOMContentLoaded", tick);
  document.addEventListener("htmx:afterSwap", tick);

  document.addEventListener("click", (event) => {
    const target = event.target.closest("button, a");
    if (!target) return;
    if (target.id === "register-passkey") register(target);
    if (target.id === "approve") approve(target);
    if (target.id === "recover") recover(target);
    if (target.id === "reject") { event.preventDefault(); showRejectConfirm(true); }
    if (target.id === "reject-no") { event.preventDefault(); showRejectConfirm(false); }
  });
})();
