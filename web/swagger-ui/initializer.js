// Swagger UI for this service's own /openapi.json (resources/api_reference.py serves it).
// validatorUrl null: Swagger UI would otherwise send the document to its public validator
// for the badge; nothing leaves the page.
// A document that names no deployment address (no PUBLIC_BASE_URL and no trusted proxy: its
// server is "/") is shown with this page's own origin, the address the reader reached: "Try it
// out" then names where it sends the requests.
window.addEventListener("load", function () {
  fetch("/openapi.json", { credentials: "omit" })
    .then(function (answer) { return answer.json(); })
    .then(function (spec) {
      (spec.servers || []).forEach(function (server) {
        if (server.url.charAt(0) === "/") {
          server.url = window.location.origin + server.url.replace(/\/$/, "");
        }
      });
      window.ui = SwaggerUIBundle({
        spec: spec,
        dom_id: "#swagger-ui",
        deepLinking: true,
        validatorUrl: null,
        docExpansion: "list",
        defaultModelsExpandDepth: 0,
        displayOperationId: true,
        layout: "BaseLayout",
      });
    });
});
