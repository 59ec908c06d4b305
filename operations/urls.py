from django.urls import path

from operations import views

api_urlpatterns = [
    path("operations", views.OperationSubmitView.as_view(), name="submit"),
    path("operations/quotes", views.QuoteCreateView.as_view(), name="quote"),
    path("operations/<str:operation_id>", views.OperationStatusView.as_view(), name="status"),
]

staff_urlpatterns = [
    path("operations/review/", views.review_queue, name="review-queue"),
    path("operations/review/<uuid:operation_id>/", views.review_decide, name="review-decide"),
    path("operations/<uuid:operation_id>/", views.operation_timeline, name="operation-timeline"),
]
