from django.urls import path

from messaging import views

api_urlpatterns = [
    path("actions/status", views.DeliveryStatusView.as_view(), name="status"),
    path("actions/send", views.DeliverySendView.as_view(), name="send"),
    path("actions/cancel", views.DeliveryCancelView.as_view(), name="cancel"),
]

staff_urlpatterns = [
    path("deliveries/<uuid:delivery_id>/", views.delivery_timeline, name="delivery-timeline"),
]
