// Swagger UI for this service's own /openapi.json (resources/api_reference.py serves it).
// validatorUrl null: Swagger UI would otherwise send the document to its public validator
// for the badge; nothing leaves the page.
window.addEventListener("load", function () {
  window.ui = SwaggerUIBundle({
    url: "/openapi.json",
    dom_id: "#swagger-ui",
    deepLinking: true,
    validatorUrl: null,
    docExpansion: "list",
    defaultModelsExpandDepth: 0,
    displayOperationId: true,
    layout: "BaseLayout",
  });
});
