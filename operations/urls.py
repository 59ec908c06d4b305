from django.urls import path

from operations import views

api_urlpatterns = [
    path("operations", views.OperationSubmitView.as_view(), name="submit"),
    # Quotes have their own collection: under operations/ a quote route would shadow the
    # status of an operation id ("quotes" is an id that answers Operation not found).
    path("quotes", views.QuoteCreateView.as_view(), name="quote"),
    path("operations/<str:operation_id>", views.OperationStatusView.as_view(), name="status"),
    path(
        "operations/<str:operation_id>/cancel", views.OperationCancelView.as_view(), name="cancel"
    ),
    path(
        "operations/<str:operation_id>/result", views.OperationResultView.as_view(), name="result"
    ),
]

staff_urlpatterns = [
    path("operations/review/", views.review_queue, name="review-queue"),
    path("operations/review/<uuid:operation_id>/", views.review_decide, name="review-decide"),
    path("operations/<uuid:operation_id>/", views.operation_timeline, name="operation-timeline"),
]
